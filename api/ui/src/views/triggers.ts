// Triggers (#/p/<project>/triggers): the project's triggers, by name, each
// with what fires it (a run of a pipeline ending in some states, or a
// signed request to its hook URL, shown to copy), what it starts (a
// pipeline, a pinned version or the newest), its params as written
// (references such as {{ upstream.params.lr }} are text here: the gateway
// reads them when it fires), its rate limit, enabled or not and its last
// firing; a form creates one (the gateway's 422 at its fields; a hook's
// secret shown once). A trigger's page (…/triggers/<name>) has its firing
// log, newest first and paged: the source (the upstream run, linked, or
// the hook delivery), the state, the attempts, the run it started,
// linked, the error and the times; Disable (after a confirmation) /
// Enable and Delete (after a confirmation). Viewers read, and are not
// offered the create form, Enable, Disable or Delete; a refused change
// shows the gateway's problem. Both pages refresh every few seconds.

import { ApiError, call, enc, get, query } from "../api";
import { type Child, fmtTime, h, replace } from "../dom";
import { href } from "../route";
import { canEdit, roleNote } from "../session";
import type { CreatedTrigger, FieldError, Pipeline, RunState, Trigger, TriggerCreate, TriggerFiring, TriggerFiringList } from "../types";
import { message, type View } from "./view";

const LIST_REFRESH_MS = 5000;
const PAGE_REFRESH_MS = 3000;
const PAGE_SIZE = 20;
const FINAL_STATES: RunState[] = ["SUCCEEDED", "FAILED", "CANCELLED", "TERMINATED"];

/** deleted is the trigger the page just deleted: the list says so once. */
let deleted = "";

const base = (project: string) => `/v1/projects/${enc(project)}/triggers`;

/** problemBox is errorBox, with what a 403 or 503 means here. */
function problemBox(e: unknown, prefix = ""): HTMLElement {
  const box = h("div", { class: "alert error", role: "alert" }, prefix, message(e));
  if (e instanceof ApiError && e.status === 403)
    box.append(h("div", { class: "hint" }, "Viewers read triggers and their firings; creating, enabling, disabling and deleting them needs an editor token of this project (or an admin's)."));
  if (e instanceof ApiError && e.status === 503) box.append(h("div", { class: "hint" }, "This gateway serves no triggers."));
  return box;
}

const FIRING_STATE: Record<string, string> = { pending: "PENDING", started: "SUCCEEDED", failed: "FAILED" };

function firingBadge(state: string): HTMLElement {
  return h("span", { class: "badge", "data-state": FIRING_STATE[state] ?? state, "data-firing": state }, state);
}

function enabledBadge(t: Trigger): HTMLElement {
  return h("span", { class: "badge", "data-state": t.enabled ? "SUCCEEDED" : "CANCELLED", "data-enabled": String(t.enabled) }, t.enabled ? "enabled" : "disabled");
}

/** hookURL is the trigger's inbound URL, absolute (the gateway gives a path when it has no public URL). */
function hookURL(t: Trigger): string {
  if (!t.hookUrl) return "";
  try {
    return new URL(t.hookUrl, location.origin).href;
  } catch {
    return t.hookUrl;
  }
}

/** copyable is a value in a code box with a Copy button (which, when the clipboard is refused, selects it). */
function copyable(value: string, cls: string, id?: string): HTMLElement {
  const code = h("code", { class: `copy-value ${cls}`, id }, value);
  const button = h(
    "button",
    {
      type: "button",
      class: "small copy",
      title: "Copy to the clipboard",
      onclick: () => {
        const said = (text: string) => {
          button.textContent = text;
          setTimeout(() => (button.textContent = "Copy"), 1500);
        };
        const select = () => {
          window.getSelection()?.selectAllChildren(code);
          said("Selected: Ctrl+C");
        };
        if (!navigator.clipboard) return select();
        navigator.clipboard.writeText(value).then(() => said("Copied"), select);
      },
    },
    "Copy",
  );
  return h("span", { class: "copyable" }, code, button);
}

/** firesOn says what fires t: a run of a pipeline ending in states, or its hook. */
function firesOn(project: string, t: Trigger): HTMLElement {
  const rf = t.on.runFinished;
  if (rf)
    return h(
      "span",
      { class: "fires-on", "data-on": "run" },
      "a run of ",
      h("a", { class: "upstream", href: href.pipeline(project, rf.pipeline) }, rf.pipeline),
      " ends ",
      h(
        "span",
        { class: "chips" },
        (rf.states?.length ? rf.states : ["SUCCEEDED"]).map((s) => h("span", { class: "chip mono", "data-run-state": s }, s)),
      ),
    );
  if (t.on.hook) return h("span", { class: "fires-on", "data-on": "hook" }, "a signed POST to ", copyable(hookURL(t), "hook-url"));
  return h("span", { class: "muted" }, "(unknown)");
}

/** target is what t starts: its pipeline, at its pinned version or the newest. */
function target(project: string, t: Trigger): HTMLElement {
  return h(
    "span",
    { class: "target" },
    h("a", { class: "target-pipeline", href: href.pipeline(project, t.pipeline, t.version) }, t.pipeline),
    " ",
    t.version ? h("span", { class: "pill target-version" }, `v${t.version}`) : h("span", { class: "muted target-version" }, "newest version"),
  );
}

/** refs shows a string with its {{ … }} references marked; all of it stays text. */
function refs(s: string): Child[] {
  const out: Child[] = [];
  const re = /\{\{.*?\}\}/g;
  let i = 0;
  for (let m = re.exec(s); m; m = re.exec(s)) {
    if (m.index > i) out.push(s.slice(i, m.index));
    out.push(h("span", { class: "ref" }, m[0]));
    i = m.index + m[0].length;
  }
  if (i < s.length) out.push(s.slice(i));
  return out;
}

/** paramsView lists t's params as written: name = value (a string quoted, with its references marked). */
function paramsView(params: Record<string, unknown>): HTMLElement {
  const names = Object.keys(params ?? {});
  if (!names.length) return h("span", { class: "muted" }, "none (the pipeline's defaults)");
  return h(
    "table",
    { class: "params" },
    h(
      "tbody",
      {},
      names.map((n) => {
        const v = params[n];
        return h(
          "tr",
          { "data-param": n },
          h("th", { class: "mono" }, n),
          h("td", {}, h("code", { class: "param-value" }, typeof v === "string" ? ['"', refs(v), '"'] : JSON.stringify(v))),
        );
      }),
    ),
  );
}

function howTo(project: string): HTMLElement {
  const origin = location.origin;
  return h(
    "details",
    { class: "howto", id: "trigger-howto" },
    h("summary", {}, "Creating triggers from the CLI or REST"),
    h(
      "pre",
      { class: "json" },
      `# When a run of prepare succeeds, start train with what it exported.
atelier triggers create retrain --pipeline train --on-run-finished prepare \\
  -p 'dataset={{ upstream.steps.export.outputs.path }}' -p 'lr={{ upstream.params.lr }}'

# The same over REST (a hook trigger: "on": {"hook": {}}; its secret is in this answer only).
curl -sS -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '{
  "name": "retrain", "pipeline": "train",
  "on": {"runFinished": {"pipeline": "prepare", "states": ["SUCCEEDED"]}},
  "params": {"dataset": "{{ upstream.steps.export.outputs.path }}", "lr": "{{ upstream.params.lr }}"}
}' ${origin}${base(project)}`,
    ),
    h("p", { class: "note" }, "See docs/api.md, Triggers: the references a trigger's params may hold, and how a hook request is signed."),
  );
}

export class TriggersPage implements View {
  readonly el = h("section", { class: "page triggers" });
  private readonly table = h("div", { class: "card table-card", id: "triggers-host" });
  private readonly flash = h("div", { id: "triggers-flash" });
  private readonly created = h("div", { id: "trigger-created-host" });
  private readonly howto: HTMLDetailsElement;
  private readonly abort = new AbortController();
  private readonly form: CreateForm;
  private timer?: number;
  private shown = "";

  constructor(private readonly project: string) {
    this.howto = howTo(project) as HTMLDetailsElement;
    this.form = new CreateForm(project, this.abort.signal, (c) => this.onCreated(c));
    // A viewer is not offered the create form (the gateway would refuse it).
    const edit = canEdit();
    const open = h(
      "button",
      {
        type: "button",
        class: "primary",
        id: "new-trigger",
        onclick: () => {
          this.form.el.hidden = !this.form.el.hidden;
          if (!this.form.el.hidden) this.form.focus();
        },
      },
      "New trigger…",
    );
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Triggers"), h("span", { class: "spacer" }), h("span", { class: "muted small" }, `refreshes every ${LIST_REFRESH_MS / 1000}s`), edit ? open : null),
      edit ? null : roleNote("editor", "Creating, enabling, disabling and deleting triggers", "triggers-role-note"),
      h(
        "p",
        { class: "note" },
        "A trigger starts a pipeline when a run of another pipeline finishes, or when a signed request reaches its hook URL. Its params may read the firing ({{ upstream.… }}, {{ body.… }}); they are shown as written.",
      ),
      edit ? this.form.el : null,
      this.created,
      this.flash,
      this.table,
      this.howto,
    );
    if (deleted) {
      replace(this.flash, h("div", { class: "alert info", role: "status" }, `Deleted the trigger ${deleted}, with its firing log; the runs it started stay.`));
      deleted = "";
    }
    replace(this.table, h("p", { class: "empty" }, "Loading…"));
    void this.load();
  }

  dispose(): void {
    this.abort.abort();
    clearTimeout(this.timer);
  }

  private onCreated(c: CreatedTrigger): void {
    const t = c.trigger;
    const p = this.project;
    replace(
      this.created,
      h(
        "div",
        { class: "alert info created", id: "trigger-created", role: "status" },
        h("div", {}, "Created the trigger ", h("a", { href: href.triggers(p, t.name), id: "created-link" }, t.name), "."),
        t.on.hook
          ? [
              h("div", {}, "Its hook URL: ", copyable(hookURL(t), "hook-url")),
              c.secret
                ? h(
                    "div",
                    { class: "secret-once" },
                    "Its secret, shown this once (the gateway never returns it again; to change it, delete the trigger and create it again): ",
                    copyable(c.secret, "secret", "created-secret"),
                  )
                : null,
              h(
                "div",
                { class: "small" },
                "Sign each request: X-Atelier-Timestamp: <Unix seconds> and X-Atelier-Signature: sha256=<hex HMAC-SHA256 of \"<timestamp>.<body>\" with the secret> (or GitHub's X-Hub-Signature-256); X-Atelier-Delivery names a delivery, fired once.",
              ),
            ]
          : null,
        h("div", {}, h("button", { type: "button", class: "small", id: "dismiss-created", onclick: () => replace(this.created) }, "Dismiss")),
      ),
    );
    replace(this.flash);
    void this.load();
  }

  private async load(): Promise<void> {
    clearTimeout(this.timer);
    const signal = this.abort.signal;
    try {
      const list = (await get<{ items: Trigger[] }>(base(this.project), signal)).items;
      // Each one's newest firing: is it firing, and does it work?
      const last = new Map<string, TriggerFiring | Error | undefined>();
      await Promise.all(
        list.map(async (t) => {
          try {
            last.set(t.name, (await get<TriggerFiringList>(`${base(this.project)}/${enc(t.name)}/firings?pageSize=1`, signal)).items[0]);
          } catch (e) {
            last.set(t.name, e instanceof Error ? e : new Error(String(e)));
          }
        }),
      );
      if (signal.aborted) return;
      this.render(list, last);
    } catch (e) {
      if (signal.aborted) return;
      replace(this.table, problemBox(e));
      this.shown = "";
      if (e instanceof ApiError && (e.status === 403 || e.status === 503)) return;
    }
    if (!signal.aborted) this.timer = window.setTimeout(() => void this.load(), LIST_REFRESH_MS);
  }

  private render(list: Trigger[], last: Map<string, TriggerFiring | Error | undefined>): void {
    // Redrawn only when something changed (a link is not pulled away under the pointer).
    const key = JSON.stringify([list, [...last].map(([n, f]) => [n, f instanceof Error ? f.message : f])]);
    if (key === this.shown) return;
    this.shown = key;
    const p = this.project;
    if (!list.length) this.howto.open = true;
    replace(
      this.table,
      list.length
        ? h(
            "table",
            { class: "list", id: "triggers" },
            h("thead", {}, h("tr", {}, ["Name", "Fires when", "Starts", "Params", "At most", "State", "Last firing"].map((c) => h("th", {}, c)))),
            h(
              "tbody",
              {},
              list.map((t) => {
                const f = last.get(t.name);
                return h(
                  "tr",
                  { "data-trigger": t.name, "data-kind": t.on.hook ? "hook" : "run" },
                  h("td", {}, h("a", { class: "trigger-name", href: href.triggers(p, t.name) }, t.name), t.description ? h("div", { class: "muted small desc" }, t.description) : null),
                  h("td", { class: "on-cell" }, firesOn(p, t)),
                  h("td", { class: "nowrap" }, target(p, t)),
                  h("td", { class: "params-cell" }, paramsView(t.params)),
                  h("td", { class: "max-per-minute nowrap", title: "runs started a minute at most; firings beyond it wait" }, `${t.maxPerMinute}/min`),
                  h("td", {}, enabledBadge(t)),
                  h(
                    "td",
                    { class: "nowrap last-firing" },
                    f instanceof Error
                      ? h("span", { class: "error-text", title: message(f) }, "unreadable")
                      : f
                        ? [firingBadge(f.state), " ", h("span", { class: "muted small" }, fmtTime(f.createdAt))]
                        : h("span", { class: "muted" }, "never fired"),
                  ),
                );
              }),
            ),
          )
        : h("p", { class: "empty", id: "no-triggers" }, "No trigger yet: New trigger… above, or the CLI or REST (below)."),
    );
  }
}

/** A field of the create form: its wrapper, the control and where the gateway's message about it goes. */
interface Field {
  el: HTMLElement;
  control: HTMLElement;
  error: HTMLElement;
}

/**
 * CreateForm sends POST …/triggers. The page flags only what it cannot
 * send (params that are not a JSON object, a number field holding text);
 * the gateway judges the rest, and each problem of its 422 is shown at
 * the field its path names (name, on.runFinished.pipeline,
 * on.runFinished.states[1], pipeline, version, params.lr, maxPerMinute…).
 */
class CreateForm {
  readonly el: HTMLFormElement;
  private readonly fields = new Map<string, Field>();
  private readonly formError = h("div", { class: "form-error", hidden: true });
  private readonly submit = h("button", { type: "submit", class: "primary", id: "create-trigger-submit" }, "Create trigger");
  private readonly name = h("input", { name: "name", id: "trigger-name", autocomplete: "off", spellcheck: "false", placeholder: "retrain" });
  private readonly description = h("input", { name: "description", id: "trigger-description", maxlength: 1000, placeholder: "optional" });
  private readonly kindRun = h("input", { type: "radio", name: "kind", value: "run", id: "trigger-kind-run", checked: true });
  private readonly kindHook = h("input", { type: "radio", name: "kind", value: "hook", id: "trigger-kind-hook" });
  private readonly upstream = h("input", { name: "upstream", id: "trigger-upstream", list: "trigger-pipelines", autocomplete: "off", placeholder: "prepare" });
  private readonly states = FINAL_STATES.map((s) => h("input", { type: "checkbox", name: "states", value: s, checked: s === "SUCCEEDED" }));
  private readonly pipeline = h("input", { name: "pipeline", id: "trigger-pipeline", list: "trigger-pipelines", autocomplete: "off", placeholder: "train" });
  private readonly version = h("input", { type: "number", name: "version", id: "trigger-version", min: 1, step: 1, placeholder: "newest" });
  private readonly params = h("textarea", { name: "params", id: "trigger-params", rows: 4, spellcheck: "false" });
  private readonly maxPerMinute = h("input", { type: "number", name: "maxPerMinute", id: "trigger-max-per-minute", min: 1, max: 1000, step: 1, placeholder: "60" });
  private readonly enabled = h("input", { type: "checkbox", name: "enabled", id: "trigger-enabled", checked: true });
  private readonly pipelines = h("datalist", { id: "trigger-pipelines" });
  private readonly kind: () => void;
  private sending = false;

  constructor(
    private readonly project: string,
    private readonly signal: AbortSignal,
    private readonly done: (c: CreatedTrigger) => void,
  ) {
    const runOnly = h(
      "div",
      { class: "run-only" },
      this.field("upstream", "When a run of", this.upstream, "the upstream pipeline (or Go workflow); not the one it starts"),
      this.field(
        "states",
        "ends",
        h(
          "span",
          { class: "states", id: "trigger-states" },
          this.states.map((c) => h("label", { class: "check" }, c, c.value)),
        ),
        "the final states that fire it",
      ),
    );
    this.kind = () => {
      runOnly.hidden = this.kindHook.checked;
      this.params.placeholder = this.kindHook.checked ? '{"dataset": "s3://bucket/{{ body.ref }}"}' : '{"dataset": "{{ upstream.steps.export.outputs.path }}", "lr": "{{ upstream.params.lr }}"}';
    };
    this.kindRun.addEventListener("change", this.kind);
    this.kindHook.addEventListener("change", this.kind);
    this.kind();
    this.el = h(
      "form",
      {
        class: "card trigger-form",
        id: "create-trigger",
        hidden: true,
        novalidate: true,
        onsubmit: ((ev: Event) => {
          ev.preventDefault();
          void this.send();
        }) as EventListener,
      },
      h("h2", {}, "New trigger"),
      this.pipelines,
      this.field("name", "Name", this.name, "a DNS label: lowercase letters, digits and '-'"),
      this.field("description", "Description", this.description),
      this.field(
        "on",
        "Fires",
        h("span", { class: "kinds" }, h("label", { class: "check" }, this.kindRun, "when a run of a pipeline finishes"), h("label", { class: "check" }, this.kindHook, "on a signed request to its hook URL")),
      ),
      runOnly,
      this.field("pipeline", "Starts the pipeline", this.pipeline),
      this.field("version", "Version", this.version, "empty: the newest version when it fires"),
      this.field(
        "params",
        "Params",
        this.params,
        "a JSON object: the started run's params. Strings may read the firing — {{ upstream.params.x }}, {{ upstream.steps.s.outputs.y }}, {{ upstream.outputs.z }}, {{ upstream.runId }} for a run, {{ body.key }} for a hook — when it fires.",
      ),
      this.field("maxPerMinute", "Runs per minute at most", this.maxPerMinute, "1 to 1000; empty: 60. Firings beyond it wait."),
      this.field("enabled", "Enabled", this.enabled),
      this.formError,
      h(
        "div",
        { class: "actions" },
        this.submit,
        h(
          "button",
          {
            type: "button",
            id: "create-trigger-cancel",
            onclick: () => {
              this.el.hidden = true;
            },
          },
          "Cancel",
        ),
      ),
    );
    void this.loadPipelines();
  }

  focus(): void {
    this.name.focus();
  }

  private field(key: string, label: string, control: HTMLElement, hint?: string): HTMLElement {
    const error = h("p", { class: "field-error", role: "alert", hidden: true });
    // A group of radios or checkboxes is a group, not one label.
    const row = control instanceof HTMLInputElement || control instanceof HTMLTextAreaElement ? h("label", { class: "field-row" }) : h("div", { class: "field-row", role: "group", "aria-label": label });
    row.append(h("span", { class: "field-label" }, label), control);
    const el = h("div", { class: "field", "data-field": key }, row, hint ? h("p", { class: "hint" }, hint) : null, error);
    this.fields.set(key, { el, control, error });
    const clear = () => this.setError(key);
    control.addEventListener("input", clear);
    control.addEventListener("change", clear);
    return el;
  }

  private setError(key: string, msg?: string): void {
    const f = this.fields.get(key);
    if (!f) return;
    if (msg === undefined) {
      f.error.textContent = "";
      f.error.hidden = true;
      f.el.classList.remove("invalid");
      f.control.removeAttribute("aria-invalid");
      return;
    }
    f.error.textContent = f.error.textContent ? `${f.error.textContent}\n${msg}` : msg;
    f.error.hidden = false;
    f.el.classList.add("invalid");
    f.control.setAttribute("aria-invalid", "true");
  }

  /** fieldOf is the field a problem's path is about. */
  private fieldOf(path: string): string | undefined {
    if (path === "on.runFinished.pipeline") return "upstream";
    if (/^on\.runFinished\.states(\[\d+\])?$/.test(path)) return "states";
    if (path === "on" || path.startsWith("on.")) return "on";
    if (path === "params" || path.startsWith("params.") || path.startsWith("params[")) return "params";
    return this.fields.has(path) ? path : undefined;
  }

  private async loadPipelines(): Promise<void> {
    try {
      const list = (await get<{ pipelines: Pipeline[] }>(`/v1/projects/${enc(this.project)}/pipelines`, this.signal)).pipelines;
      replace(this.pipelines, list.map((p) => h("option", { value: p.name })));
    } catch {
      /* only suggestions */
    }
  }

  private async send(): Promise<void> {
    if (this.sending) return;
    for (const k of this.fields.keys()) this.setError(k);
    this.formError.hidden = true;
    // What cannot be sent at all is said here.
    let ok = true;
    let params: Record<string, unknown> | undefined;
    const text = this.params.value.trim();
    if (text) {
      try {
        const v: unknown = JSON.parse(text);
        if (v === null || typeof v !== "object" || Array.isArray(v)) throw new Error("not a JSON object");
        params = v as Record<string, unknown>;
      } catch (e) {
        this.setError("params", `not a JSON object: ${e instanceof Error ? e.message : String(e)}`);
        ok = false;
      }
    }
    const num = (input: HTMLInputElement, key: string): number | undefined => {
      if (input.validity.badInput || (input.value && !/^-?\d+$/.test(input.value.trim()))) {
        this.setError(key, "not a whole number");
        ok = false;
      }
      return input.value ? Number(input.value) : undefined;
    };
    const version = num(this.version, "version");
    const maxPerMinute = num(this.maxPerMinute, "maxPerMinute");
    if (!ok) return;
    const body: TriggerCreate = {
      name: this.name.value.trim(),
      on: this.kindHook.checked ? { hook: {} } : { runFinished: { pipeline: this.upstream.value.trim(), states: this.states.filter((c) => c.checked).map((c) => c.value as RunState) } },
      pipeline: this.pipeline.value.trim(),
      enabled: this.enabled.checked,
    };
    if (version !== undefined) body.version = version;
    if (maxPerMinute !== undefined) body.maxPerMinute = maxPerMinute;
    if (params) body.params = params;
    if (this.description.value.trim()) body.description = this.description.value.trim();
    this.sending = true;
    this.submit.disabled = true;
    try {
      const c = await call<CreatedTrigger>("POST", base(this.project), body, this.signal);
      this.el.reset();
      this.kind();
      this.el.hidden = true;
      this.done(c);
    } catch (e) {
      if (this.signal.aborted) return;
      this.showProblem(e);
    } finally {
      this.sending = false;
      this.submit.disabled = false;
    }
  }

  /** showProblem puts each error of the gateway's problem at its field; the rest under the form. */
  private showProblem(e: unknown): void {
    const errs = e instanceof ApiError ? (e.problem.errors ?? []) : [];
    const loose: FieldError[] = [];
    let first: string | undefined;
    if (e instanceof ApiError && e.status === 409) {
      // The name is taken.
      this.setError("name", message(e));
      first = "name";
    }
    for (const fe of errs) {
      const key = this.fieldOf(fe.path);
      if (!key) {
        loose.push(fe);
        continue;
      }
      // Said with its path where the field holds several (params.lr, states[1]).
      this.setError(key, fe.path === key || (key === "upstream" && fe.path === "on.runFinished.pipeline") ? fe.message : `${fe.path}: ${fe.message}`);
      first ??= key;
    }
    const status = e instanceof ApiError ? ` (HTTP ${e.status})` : "";
    const summary = first && !loose.length ? `The gateway refused the trigger${status}: see the fields marked above.` : errs.length ? `The gateway refused the trigger${status}:` : "";
    replace(
      this.formError,
      summary
        ? h("div", { class: "alert error", role: "alert" }, summary, loose.length ? h("ul", {}, loose.map((fe) => h("li", {}, h("code", {}, fe.path), ": ", fe.message))) : null)
        : problemBox(e, "The gateway refused the trigger: "),
    );
    this.formError.hidden = false;
    if (first) (this.fields.get(first)?.control.querySelector("input") ?? this.fields.get(first)?.control)?.focus();
  }
}

export class TriggerPage implements View {
  readonly el = h("section", { class: "page trigger" });
  private readonly head = h("div", { class: "card", id: "trigger" });
  private readonly confirm = h("form", { class: "confirm", id: "confirm-trigger", hidden: true });
  private readonly flash = h("div", { id: "trigger-flash" });
  /** stale says a refresh failed (the page shows what it last read); cleared by the next one. */
  private readonly stale = h("div", { id: "trigger-stale" });
  private readonly firings = h("div", { class: "card table-card", id: "firings-host" });
  private readonly pager = h("div", { class: "pager" });
  private readonly abort = new AbortController();
  private timer?: number;
  private tokens: string[] = [];
  private token = "";
  private trigger?: Trigger;
  private shownHead = "";
  private shownFirings = "";
  private deleting = false;
  /** gen counts loads: an answer to an older one (sent before a change) is dropped. */
  private gen = 0;

  constructor(
    private readonly project: string,
    private readonly name: string,
  ) {
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Trigger ", h("span", { class: "mono" }, name)), h("span", { class: "spacer" }), h("a", { href: href.triggers(project) }, "← Triggers")),
      canEdit() ? null : roleNote("editor", "Enabling, disabling and deleting triggers", "trigger-role-note"),
      this.flash,
      this.stale,
      this.head,
      this.confirm,
      this.firings,
      this.pager,
    );
    replace(this.head, h("p", { class: "muted" }, "Loading…"));
    this.firings.hidden = true;
    void this.load();
  }

  dispose(): void {
    this.abort.abort();
    clearTimeout(this.timer);
  }

  private get path(): string {
    return `${base(this.project)}/${enc(this.name)}`;
  }

  private async load(): Promise<void> {
    clearTimeout(this.timer);
    const signal = this.abort.signal;
    if (this.deleting) return;
    const gen = ++this.gen;
    try {
      const [t, list] = await Promise.all([get<Trigger>(this.path, signal), get<TriggerFiringList>(`${this.path}/firings${query({ pageSize: PAGE_SIZE, pageToken: this.token })}`, signal)]);
      if (signal.aborted || gen !== this.gen) return;
      this.trigger = t;
      replace(this.stale);
      this.renderHead(t);
      this.renderFirings(t, list);
    } catch (e) {
      if (signal.aborted || gen !== this.gen) return;
      if (!this.trigger || (e instanceof ApiError && e.status === 404)) {
        this.shownHead = "";
        this.firings.hidden = true;
        this.confirm.hidden = true;
        replace(this.head, problemBox(e));
        if (e instanceof ApiError && e.status >= 400 && e.status < 500) return;
      } else {
        replace(this.stale, problemBox(e, "Could not refresh (showing what was last read): "));
      }
    }
    if (!signal.aborted && !this.deleting) this.timer = window.setTimeout(() => void this.load(), PAGE_REFRESH_MS);
  }

  private renderHead(t: Trigger): void {
    const key = JSON.stringify(t);
    if (key === this.shownHead) return;
    this.shownHead = key;
    const p = this.project;
    const toggle = h(
      "button",
      {
        id: "toggle-enabled",
        type: "button",
        class: t.enabled ? "danger" : "primary",
        onclick: () => (t.enabled ? this.askDisable(t) : void this.setEnabled(true, toggle)),
      },
      t.enabled ? "Disable…" : "Enable",
    );
    const del = h("button", { id: "delete-trigger", type: "button", class: "danger", onclick: () => this.askDelete(t) }, "Delete…");
    // A viewer is not offered Enable, Disable and Delete (the gateway would refuse them).
    replace(
      this.head,
      h("div", { class: "card-title" }, h("h2", { id: "trigger-name" }, t.name), enabledBadge(t), h("span", { class: "spacer" }), canEdit() ? [toggle, del] : null),
      t.description ? h("p", { class: "desc" }, t.description) : null,
      h(
        "dl",
        { class: "meta" },
        h("dt", {}, "fires when"),
        h("dd", { id: "trigger-on" }, firesOn(p, t)),
        t.on.hook ? [h("dt", {}, "secret"), h("dd", { class: "muted" }, "set; shown once when the trigger was created, never again")] : null,
        h("dt", {}, "starts"),
        h("dd", { id: "trigger-target" }, target(p, t)),
        h("dt", {}, "params"),
        h("dd", { id: "trigger-params" }, paramsView(t.params)),
        h("dt", {}, "at most"),
        h("dd", { id: "trigger-max" }, `${t.maxPerMinute} runs a minute (firings beyond it wait)`),
        h("dt", {}, "created"),
        h("dd", {}, fmtTime(t.createdAt), t.createdBy ? ` by ${t.createdBy}` : ""),
        h("dt", {}, "runs it started"),
        h("dd", {}, h("a", { id: "trigger-runs", href: href.runs(p, { createdBy: `trigger:${t.name}` }) }, `the runs list, created by trigger:${t.name}`)),
      ),
      t.enabled
        ? null
        : h(
            "div",
            { class: "alert warn", id: "trigger-disabled" },
            t.on.hook
              ? "Disabled: its hook answers 401 and fires nothing; firings already queued wait until it is enabled again."
              : "Disabled: runs that finish meanwhile queue no firing (they are not fired later); firings already queued wait until it is enabled again.",
          ),
    );
  }

  private renderFirings(t: Trigger, list: TriggerFiringList): void {
    this.firings.hidden = false;
    const key = JSON.stringify([list, !!t.on.hook, this.token]);
    if (key === this.shownFirings) return;
    this.shownFirings = key;
    const p = this.project;
    const hook = !!t.on.hook;
    replace(
      this.firings,
      h(
        "div",
        { class: "card-title pad" },
        h("h2", {}, "Firings"),
        h("span", { class: "muted small" }, `newest first · refreshes every ${PAGE_REFRESH_MS / 1000}s`),
      ),
      list.items.length
        ? h(
            "table",
            { class: "list", id: "firings" },
            h("thead", {}, h("tr", {}, ["Fired", hook ? "Delivery" : "Upstream run", "State", "Attempts", "Run started", "Error", "Finished"].map((c) => h("th", {}, c)))),
            h(
              "tbody",
              {},
              list.items.map((f) =>
                h(
                  "tr",
                  { "data-firing": f.id, "data-source": f.source, "data-state": FIRING_STATE[f.state] ?? f.state },
                  h("td", { class: "nowrap created" }, fmtTime(f.createdAt)),
                  h("td", { class: "source" }, hook ? h("span", { class: "mono source-delivery" }, f.source) : h("a", { class: "mono source-run", href: href.run(p, f.source) }, f.source)),
                  h("td", { class: "state" }, firingBadge(f.state)),
                  h("td", { class: "attempts" }, String(f.attempts)),
                  h("td", { class: "run" }, f.runId ? h("a", { class: "mono run-link", href: href.run(p, f.runId) }, f.runId) : h("span", { class: "muted" }, "—")),
                  h("td", { class: "err" }, f.error ?? h("span", { class: "muted" }, "—")),
                  h(
                    "td",
                    { class: "nowrap finished" },
                    f.finishedAt ? fmtTime(f.finishedAt) : f.state === "pending" && f.nextAttemptAt ? h("span", { class: "muted" }, `next attempt ${fmtTime(f.nextAttemptAt)}`) : "",
                  ),
                ),
              ),
            ),
          )
        : h(
            "p",
            { class: "empty", id: "no-firings" },
            hook ? "Not fired yet: each signed request to its hook URL is a firing." : `Not fired yet: each run of ${t.on.runFinished?.pipeline ?? "its upstream pipeline"} that ends in one of its states is a firing.`,
          ),
    );
    const newer = h("button", { disabled: !this.tokens.length && !this.token, onclick: () => this.page(this.tokens.pop() ?? "") }, "← Newer");
    const older = h(
      "button",
      {
        disabled: !list.nextPageToken,
        onclick: () => {
          this.tokens.push(this.token);
          this.page(list.nextPageToken!);
        },
      },
      "Older →",
    );
    replace(this.pager, newer, older);
  }

  private page(token: string): void {
    this.token = token;
    void this.load();
  }

  /** ask opens the confirmation under the trigger: what will happen, and the button that does it. */
  private ask(text: string, label: string, act: (yes: HTMLButtonElement) => Promise<void>): void {
    replace(this.flash);
    const yes = h("button", { type: "submit", class: "danger", id: "confirm-trigger-yes" }, label);
    replace(
      this.confirm,
      h("span", { class: "confirm-text" }, text),
      yes,
      h("button", { type: "button", id: "confirm-trigger-no", onclick: () => (this.confirm.hidden = true) }, "Keep"),
    );
    this.confirm.onsubmit = (ev: Event) => {
      ev.preventDefault();
      yes.disabled = true;
      void act(yes);
    };
    this.confirm.hidden = false;
    yes.focus();
  }

  private askDisable(t: Trigger): void {
    this.ask(
      t.on.hook
        ? `Disable ${t.name}? Its hook answers 401 to every request until it is enabled again, and firings already queued wait.`
        : `Disable ${t.name}? Runs of ${t.on.runFinished?.pipeline} that finish while it is disabled queue no firing (they are not fired later), and firings already queued wait until it is enabled again.`,
      "Disable",
      (yes) => this.setEnabled(false, yes),
    );
  }

  private async setEnabled(enabled: boolean, button: HTMLButtonElement): Promise<void> {
    button.disabled = true;
    try {
      const t = await call<Trigger>("PATCH", this.path, { enabled }, this.abort.signal);
      this.confirm.hidden = true;
      replace(this.flash);
      this.trigger = t;
      this.renderHead(t);
      void this.load();
    } catch (e) {
      if (this.abort.signal.aborted) return;
      button.disabled = false;
      replace(this.flash, problemBox(e, `${enabled ? "Enable" : "Disable"} failed: `));
    }
  }

  private askDelete(t: Trigger): void {
    this.ask(`Delete the trigger ${t.name}? Its firing log goes with it; the runs it started stay. This cannot be undone.`, "Delete", async (yes) => {
      // No refresh meanwhile: it would read a trigger that is going (404).
      this.deleting = true;
      clearTimeout(this.timer);
      try {
        await call<void>("DELETE", this.path, undefined, this.abort.signal);
        deleted = t.name;
        location.hash = href.triggers(this.project);
      } catch (e) {
        if (this.abort.signal.aborted) return;
        this.deleting = false;
        yes.disabled = false;
        replace(this.flash, problemBox(e, "Delete failed: "));
        void this.load();
      }
    });
  }
}
