// The launch form: starts a run of one pipeline version from a form built
// from the version's typed params (one field per param, the right input
// for its type, defaults prefilled, descriptions shown, required params
// marked). With ?from=<run> the fields hold that run's params instead:
// "Run again with these params" on a run's page. The retry endpoint takes
// no params (it reruns the original's, reusing what succeeded), so a run
// with edited params is a new run of the same version (POST …/runs).
//
// The gateway is the judge of the values: what the page cannot even
// parse (a number field with text, JSON that does not parse) is flagged
// before sending, everything else is sent and the gateway's 422 problem
// is shown at the fields its paths name (`params.epochs`).

import { ApiError, call, enc, get, idempotencyKey } from "../api";
import { h, replace } from "../dom";
import { href, type Route } from "../route";
import { canEdit, roleNote } from "../session";
import type { CreateRunRequest, FieldError, PipelineParam, PipelineVersion, Run } from "../types";
import { errorBox, message, type View } from "./view";

type LaunchRoute = Extract<Route, { page: "launch" }>;

/** What a field holds: a value to send, nothing (the default applies, or the gateway says it is missing), or why it cannot be read. */
type Reading = { value?: unknown; error?: string };

/** Field is one param's input, its error line, and how to read it. */
class Field {
  readonly el: HTMLElement;
  readonly input: HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;
  private readonly error: HTMLElement;
  private readonly read_: () => Reading;

  constructor(
    readonly param: PipelineParam,
    shown: unknown,
  ) {
    const p = param;
    const required = p.default === undefined || p.default === null;
    const id = `param-${p.name}`; // names are identifiers: safe in an id
    const common = { id, name: p.name, "aria-describedby": `${id}-error` };
    switch (p.type) {
      case "string": {
        const input = h("input", { ...common, type: "text", spellcheck: "false", autocomplete: "off", value: shown === undefined ? "" : typeof shown === "string" ? shown : JSON.stringify(shown) });
        this.input = input;
        // An empty field is "" for a param with a default, and no value
        // (so the gateway reports it missing) for a required one.
        this.read_ = () => (input.value === "" && required ? {} : { value: input.value });
        break;
      }
      case "integer":
      case "number": {
        const input = h("input", {
          ...common,
          type: "number",
          step: p.type === "integer" ? "1" : "any",
          inputmode: p.type === "integer" ? "numeric" : "decimal",
          value: typeof shown === "number" ? String(shown) : "",
        });
        this.input = input;
        this.read_ = () => {
          if (input.validity.badInput) return { error: `not a number` };
          const s = input.value.trim();
          if (s === "") return {};
          const n = Number(s);
          return Number.isFinite(n) ? { value: n } : { error: "not a finite number" };
        };
        break;
      }
      case "boolean": {
        if (required) {
          // A checkbox always says true or false; a required boolean
          // asks for a choice.
          const sel = h(
            "select",
            common,
            h("option", { value: "" }, "— choose —"),
            ["true", "false"].map((x) => h("option", { value: x, selected: String(shown) === x }, x)),
          );
          this.input = sel;
          this.read_ = () => (sel.value === "" ? {} : { value: sel.value === "true" });
        } else {
          const box = h("input", { ...common, type: "checkbox", checked: shown === true });
          this.input = box;
          this.read_ = () => ({ value: box.checked });
        }
        break;
      }
      default: {
        // object, array (and any type this page does not know): JSON.
        const text = shown === undefined ? "" : JSON.stringify(shown, null, 2);
        const ta = h("textarea", { ...common, class: "mono", spellcheck: "false", rows: Math.min(12, Math.max(3, text.split("\n").length)), placeholder: p.type === "array" ? "[ … ] (JSON)" : p.type === "object" ? "{ … } (JSON)" : "JSON" }, text);
        this.input = ta;
        this.read_ = () => {
          const s = ta.value.trim();
          if (s === "") return {};
          try {
            return { value: JSON.parse(s) as unknown };
          } catch (e) {
            return { error: `not valid JSON: ${e instanceof Error ? e.message : String(e)}` };
          }
        };
      }
    }
    this.error = h("p", { class: "field-error", id: `${id}-error`, role: "alert", hidden: true });
    const typeLabel = p.type === "array" ? "list (JSON)" : p.type === "object" ? "object (JSON)" : p.type;
    this.el = h(
      "div",
      { class: `field field-${p.type}`, "data-param": p.name },
      h(
        "label",
        { for: id },
        h("span", { class: "param-name mono" }, p.name),
        h("span", { class: "param-type" }, typeLabel),
        required ? h("span", { class: "required" }, "required") : null,
      ),
      p.description ? h("p", { class: "desc" }, p.description) : null,
      this.input,
      required ? null : h("p", { class: "hint" }, "Default: ", h("code", { class: "default" }, JSON.stringify(p.default))),
      this.error,
    );
    // Editing a field clears what was said about it.
    this.input.addEventListener("input", () => this.setError());
    this.input.addEventListener("change", () => this.setError());
  }

  read(): Reading {
    return this.read_();
  }

  /** setError shows messages under the field (none: clears it). */
  setError(...msgs: string[]): void {
    this.error.textContent = msgs.join("\n");
    this.error.hidden = !msgs.length;
    this.el.classList.toggle("invalid", msgs.length > 0);
    if (msgs.length) this.input.setAttribute("aria-invalid", "true");
    else this.input.removeAttribute("aria-invalid");
  }

  addError(msg: string): void {
    const now = this.error.hidden ? [] : (this.error.textContent ?? "").split("\n");
    this.setError(...now, msg);
  }
}

export class LaunchPage implements View {
  readonly el = h("section", { class: "page launch" });
  private readonly abort = new AbortController();
  private fields: Field[] = [];
  /** The Idempotency-Key of the last body sent: the same body again is the same start. */
  private sent?: { body: string; key: string };

  constructor(private readonly r: LaunchRoute) {
    if (!canEdit()) {
      // A viewer's start would be refused: the form is not offered.
      replace(
        this.el,
        h(
          "div",
          { class: "card run-head" },
          h("div", { class: "run-title" }, h("h1", {}, h("span", { class: "muted" }, "Start a run of "), r.pipeline, h("span", { class: "muted" }, ` v${r.version}`))),
          roleNote("editor", "Starting a run", "launch-role-note"),
          h("div", { class: "actions" }, h("a", { class: "button", href: href.pipeline(r.project, r.pipeline, r.version) }, "Pipeline version"), r.from ? h("a", { class: "button", href: href.run(r.project, r.from) }, "Back to the run") : null),
        ),
      );
      return;
    }
    replace(this.el, h("p", { class: "muted" }, "Loading…"));
    void this.load();
  }

  dispose(): void {
    this.abort.abort();
  }

  private get base(): string {
    return `/v1/projects/${enc(this.r.project)}`;
  }

  private async load(): Promise<void> {
    const { pipeline, version, from } = this.r;
    const signal = this.abort.signal;
    const fromRun = from ? get<Run>(`${this.base}/runs/${enc(from)}`, signal).then((run) => ({ run }), (e: unknown) => ({ err: e })) : undefined;
    let v: PipelineVersion;
    try {
      v = await get<PipelineVersion>(`${this.base}/pipelines/${enc(pipeline)}/versions/${version}`, signal);
    } catch (e) {
      if (!signal.aborted) replace(this.el, errorBox(e));
      return;
    }
    const src = await fromRun;
    if (signal.aborted) return;
    this.render(v, src && "run" in src ? src.run : undefined, src && "err" in src ? src.err : undefined);
  }

  private render(v: PipelineVersion, from: Run | undefined, fromErr: unknown): void {
    const p = this.r.project;
    const name = this.r.pipeline;
    const given = from?.status?.params ?? {};
    const params = v.spec.params ?? [];
    this.fields = params.map((prm) => new Field(prm, from && prm.name in given ? given[prm.name] : prm.default ?? undefined));

    let note: HTMLElement | null = null;
    if (from) {
      const other = from.pipeline !== name || from.version !== v.version;
      note = h(
        "div",
        { class: "alert info", id: "launch-from" },
        "Prefilled with the params of run ",
        h("a", { href: href.run(p, from.id), class: "mono" }, from.id),
        other ? ` (${from.pipeline ?? from.workflow}${from.version ? ` v${from.version}` : ""}: only the params this version declares)` : "",
        ". Starting it runs every step again; ",
        h("strong", {}, "Retry"),
        " (on a failed run's page) reuses what succeeded but cannot change the params.",
      );
    } else if (fromErr !== undefined) {
      note = h("div", { class: "alert warn", id: "launch-from" }, `Could not read the params of run ${this.r.from}: ${message(fromErr)}. The fields hold the defaults.`);
    }

    const bypass = h("input", { type: "checkbox", id: "launch-cache-bypass", checked: from?.status?.cacheBypass === true });
    const formError = h("div", { class: "alert error", id: "launch-error", role: "alert", hidden: true });
    const submit = h("button", { type: "submit", class: "primary", id: "launch-submit" }, "Start run");
    const form = h(
      "form",
      {
        class: "card launch-form",
        id: "launch-form",
        // The gateway validates: the browser's own checks would stop a
        // value before the gateway could say what is wrong with it.
        novalidate: true,
        onsubmit: ((ev: Event) => {
          ev.preventDefault();
          void this.submit(v.version, bypass.checked, formError, submit);
        }) as EventListener,
      },
      h("h2", {}, "Params"),
      params.length ? this.fields.map((f) => f.el) : h("p", { class: "muted", id: "no-params" }, "This version declares no params."),
      h("h2", {}, "Options"),
      h("label", { class: "check" }, bypass, " Bypass the step cache: run cached steps instead of reusing earlier results"),
      formError,
      h("div", { class: "actions" }, submit, h("a", { class: "button", href: from ? href.run(p, from.id) : href.pipeline(p, name, v.version) }, "Cancel")),
    );
    replace(
      this.el,
      h(
        "div",
        { class: "card run-head" },
        h(
          "div",
          { class: "run-title" },
          h("h1", {}, h("span", { class: "muted" }, "Start a run of "), name, h("span", { class: "muted" }, ` v${v.version}`)),
          h("span", { class: "spacer" }),
          h("a", { class: "button", href: href.pipeline(p, name, v.version) }, "Pipeline version"),
        ),
        v.spec.description ? h("p", { class: "desc" }, v.spec.description) : null,
        note,
      ),
      form,
    );
    setTimeout(() => this.fields[0]?.input.focus(), 0);
  }

  private async submit(version: number, bypass: boolean, formError: HTMLElement, button: HTMLButtonElement): Promise<void> {
    for (const f of this.fields) f.setError();
    formError.hidden = true;
    const params: Record<string, unknown> = {};
    let bad: Field | undefined;
    for (const f of this.fields) {
      const got = f.read();
      if (got.error !== undefined) {
        f.setError(got.error);
        bad ??= f;
      } else if (got.value !== undefined) {
        params[f.param.name] = got.value;
      }
    }
    if (bad) {
      replace(formError, "Fix the fields marked below.");
      formError.hidden = false;
      bad.input.focus();
      return;
    }
    const body: CreateRunRequest = { pipeline: this.r.pipeline, version, params };
    if (bypass) body.cache = { bypass: true };
    const text = JSON.stringify(body);
    if (this.sent?.body !== text) this.sent = { body: text, key: idempotencyKey() };
    button.disabled = true;
    button.textContent = "Starting…";
    try {
      const run = await call<Run>("POST", `${this.base}/runs`, body, this.abort.signal, undefined, { "Idempotency-Key": this.sent.key });
      location.hash = href.run(this.r.project, run.id);
    } catch (e) {
      if (this.abort.signal.aborted) return;
      this.showProblem(e, formError);
    } finally {
      button.disabled = false;
      button.textContent = "Start run";
    }
  }

  /** showProblem puts each of the problem's errors at its field; the rest (and the summary) above the button. */
  private showProblem(e: unknown, formError: HTMLElement): void {
    const errs = e instanceof ApiError ? (e.problem.errors ?? []) : [];
    const loose: FieldError[] = [];
    let first: Field | undefined;
    for (const fe of errs) {
      const f = this.fieldOf(fe.path);
      if (f) {
        f.addError(fe.message);
        first ??= f;
      } else {
        loose.push(fe);
      }
    }
    const status = e instanceof ApiError ? ` (HTTP ${e.status})` : "";
    replace(
      formError,
      first && !loose.length ? `The gateway refused the run${status}: see the fields marked above.` : errs.length ? `The gateway refused the run${status}:` : message(e),
      loose.length ? h("ul", {}, loose.map((fe) => h("li", {}, h("code", {}, fe.path), ": ", fe.message))) : null,
    );
    formError.hidden = false;
    first?.input.focus();
  }

  /** fieldOf finds the field a problem path is about: params.<name>, or a path inside it (params.cfg.key, params.tags[0]). */
  private fieldOf(path: string): Field | undefined {
    const m = /^params\.([A-Za-z_][A-Za-z0-9_]*)(?![A-Za-z0-9_])/.exec(path);
    return m ? this.fields.find((f) => f.param.name === m[1]) : undefined;
  }
}
