// The model registry (#/p/<project>/models): the project's models, by
// name, and a model's page (…/models/<name>) with
//   - its aliases (alias → version) and, for an editor, a form that points
//     an alias at a version and a Remove button per alias;
//   - its versions, newest first: each is an artifact a step wrote, linked
//     to that step on its run's page (the drawer there shows the artifact,
//     its download and its lineage); an editor can delete one;
//   - the endpoints whose revisions serve its versions (GET …/endpoints);
//   - who moved which alias when (GET …/alias-events).
//
// Moving an alias is not only bookkeeping: endpoints that follow the alias
// (model.follow) roll out the version it then names. The form says which
// endpoints follow the alias before it is sent. The gateway judges every
// change: deleting a version an alias names or an endpoint serves is a 409
// naming them, a version that does not exist a 422 at "version"; either
// is shown where the action was. Viewers read, and are not offered the
// form, Remove or Delete. Both pages refresh every few seconds.

import { ApiError, call, enc, get } from "../api";
import { fmtBytes, fmtTime, h, replace } from "../dom";
import { href } from "../route";
import { canEdit, roleNote } from "../session";
import type { FieldError, Model, ModelAliasEvent, ModelAliasEventList, ModelAliasUpdate, ModelList, ModelServing, ModelServingList, ModelVersion, ModelVersionList } from "../types";
import { shortDigest } from "./artifacts";
import { errorBox, message, type View } from "./view";

const REFRESH_MS = 5000;

const modelsPath = (project: string) => `/v1/projects/${enc(project)}/models`;

/** versionText is "v3". */
const versionText = (n: number | undefined) => (n === undefined ? "" : `v${n}`);

// ---- the list ----

export class ModelsPage implements View {
  readonly el = h("section", { class: "page models" });
  private readonly table = h("div", { class: "card table-card", id: "models-host" });
  private readonly problem = h("div", {});
  private readonly abort = new AbortController();
  private timer?: number;
  /** What the table shows (JSON), so an unchanged refresh redraws nothing. */
  private shown = "";

  constructor(private readonly project: string) {
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Models"), h("span", { class: "spacer" }), h("span", { class: "muted small" }, `refreshes every ${REFRESH_MS / 1000}s`)),
      h(
        "p",
        { class: "note" },
        "Each version of a model is an artifact a run wrote: a step output with ",
        h("code", {}, "register: <model>"),
        " adds the next version when the step succeeds. Aliases (champion, candidate, …) name versions; endpoints serve ",
        h("code", {}, "<model>@<alias>"),
        ".",
      ),
      this.problem,
      this.table,
    );
    replace(this.table, h("p", { class: "empty" }, "Loading…"));
    void this.load();
  }

  dispose(): void {
    this.abort.abort();
    clearTimeout(this.timer);
  }

  private async load(): Promise<void> {
    clearTimeout(this.timer);
    const signal = this.abort.signal;
    try {
      const list = await get<ModelList>(modelsPath(this.project), signal);
      replace(this.problem);
      this.render(list.items);
    } catch (e) {
      if (signal.aborted) return;
      // What the table showed stays, under the error.
      replace(this.problem, errorBox(e));
      if (!this.shown) replace(this.table);
    }
    if (!signal.aborted) this.timer = window.setTimeout(() => void this.load(), REFRESH_MS);
  }

  private render(items: Model[]): void {
    const key = JSON.stringify(items);
    if (key === this.shown) return;
    this.shown = key;
    const p = this.project;
    if (!items.length) {
      replace(
        this.table,
        h("p", { class: "empty", id: "no-models" }, "No model in this project yet. Register one from a pipeline (an output with ", h("code", {}, "register: <model>"), ") or with ", h("code", {}, "POST /v1/projects/{project}/models"), "."),
      );
      return;
    }
    // The list carries no aliases (the gateway fills them on one model
    // only), and asking each model for them would be a request per row
    // every refresh: they are on the model's page.
    replace(
      this.table,
      h(
        "table",
        { class: "list", id: "models" },
        h("thead", {}, h("tr", {}, ["Model", "Latest version", "Description", "Created", "By"].map((c) => h("th", {}, c)))),
        h(
          "tbody",
          {},
          items.map((m) =>
            h(
              "tr",
              { "data-model": m.name },
              h("td", {}, h("a", { href: href.models(p, m.name) }, m.name)),
              h("td", { class: "latest" }, m.latest ? versionText(m.latest) : h("span", { class: "muted" }, "no version")),
              h("td", { class: "ellipsis-wide", title: m.description || null }, m.description),
              h("td", { class: "nowrap" }, fmtTime(m.createdAt)),
              h("td", {}, m.createdBy),
            ),
          ),
        ),
      ),
    );
  }
}

// ---- one model ----

/** Settled is one read of the page: its answer, or why it failed. */
type Settled<T> = { ok: T } | { err: unknown };

async function settle<T>(p: Promise<T>): Promise<Settled<T>> {
  try {
    return { ok: await p };
  } catch (err) {
    return { err };
  }
}

/** settledKey is what a part shows, to redraw it only when that changed. */
function settledKey(s: Settled<unknown>, ...more: unknown[]): string {
  return JSON.stringify(["ok" in s ? s.ok : `error: ${message(s.err)}`, ...more]);
}

export class ModelPage implements View {
  readonly el = h("section", { class: "page model" });
  private readonly abort = new AbortController();
  private timer?: number;
  private seq = 0;
  private readonly keys: Record<string, string> = {};
  private readonly headInfo = h("div", {});
  private readonly problem = h("div", {});
  private readonly flash = h("div", { id: "model-flash" });
  private readonly confirm = h("form", { class: "confirm", id: "confirm-model", hidden: true });
  /** The cards under the head, hidden until the model is read (not under a 404). */
  private readonly body = h("div", { hidden: true });
  private readonly aliasesHost = h("div", { id: "aliases-host" });
  private readonly versionsHost = h("div", { id: "versions-host" });
  private readonly endpointsHost = h("div", { id: "model-endpoints-host" });
  private readonly historyHost = h("div", { id: "alias-events-host" });
  // The alias form lives outside the parts a refresh redraws, so what is
  // typed in it stays.
  private readonly aliasInput = h("input", { id: "alias-name", name: "alias", autocomplete: "off", spellcheck: "false", placeholder: "champion", required: true, "aria-label": "alias" });
  private readonly versionSelect = h("select", { id: "alias-version", name: "version", "aria-label": "version" });
  private readonly aliasError = h("p", { class: "field-error", id: "alias-name-error", role: "alert", hidden: true });
  private readonly versionError = h("p", { class: "field-error", id: "alias-version-error", role: "alert", hidden: true });
  private readonly aliasFormError = h("div", { class: "alert error", id: "alias-form-error", role: "alert", hidden: true });
  private readonly aliasHint = h("p", { class: "hint", id: "alias-followers" });
  private readonly setAliasBtn = h("button", { type: "submit", class: "primary", id: "set-alias" }, "Point alias");
  private model?: Model;
  private versions: ModelVersion[] = [];
  private serving: ModelServing[] = [];
  /** A PUT of the alias form is in flight (a refresh must not enable its button). */
  private sendingAlias = false;

  constructor(
    private readonly project: string,
    private readonly name: string,
  ) {
    const edit = canEdit();
    this.aliasInput.addEventListener("input", () => {
      setFieldError(this.aliasInput, this.aliasError);
      this.followersHint();
    });
    this.versionSelect.addEventListener("change", () => setFieldError(this.versionSelect, this.versionError));
    const aliasForm = h(
      "form",
      {
        class: "alias-form",
        id: "alias-form",
        onsubmit: ((ev: Event) => {
          ev.preventDefault();
          void this.setAlias();
        }) as EventListener,
      },
      h("div", { class: "alias-fields" }, h("label", {}, "Alias ", this.aliasInput), h("label", {}, "→ version ", this.versionSelect), this.setAliasBtn),
      this.aliasError,
      this.versionError,
      this.aliasHint,
      this.aliasFormError,
    );
    replace(
      this.el,
      h(
        "div",
        { class: "card run-head" },
        h(
          "div",
          { class: "run-title" },
          h("h1", {}, h("span", { class: "muted" }, "Model "), h("span", { id: "model-name" }, name)),
          h("span", { class: "spacer" }),
          h("div", { class: "actions" }, h("a", { class: "button", href: href.models(project) }, "All models")),
        ),
        this.headInfo,
      ),
      // A viewer is not offered the alias form, Remove and Delete (the gateway would refuse them).
      edit ? null : roleNote("editor", "Setting and removing aliases and deleting versions", "model-role-note"),
      this.problem,
      this.confirm,
      this.flash,
      this.body,
    );
    replace(
      this.body,
      h("div", { class: "card", id: "aliases-card" }, h("div", { class: "card-title" }, h("h2", {}, "Aliases")), this.aliasesHost, edit ? aliasForm : null),
      h("div", { class: "card table-card", id: "versions-card" }, h("div", { class: "card-title pad" }, h("h2", {}, "Versions"), h("span", { class: "muted small" }, "newest first")), this.versionsHost),
      h("div", { class: "card", id: "model-endpoints-card" }, h("div", { class: "card-title" }, h("h2", {}, "Served by endpoints")), this.endpointsHost),
      h("div", { class: "card", id: "alias-events-card" }, h("div", { class: "card-title" }, h("h2", {}, "Alias history"), h("span", { class: "muted small" }, "newest first")), this.historyHost),
    );
    replace(this.headInfo, h("p", { class: "muted" }, "Loading…"));
    void this.load();
  }

  dispose(): void {
    this.abort.abort();
    clearTimeout(this.timer);
  }

  private get base(): string {
    return `${modelsPath(this.project)}/${enc(this.name)}`;
  }

  private async load(): Promise<void> {
    clearTimeout(this.timer);
    const seq = ++this.seq;
    const signal = this.abort.signal;
    // Four reads, each shown on its own: the endpoints are asked of every
    // endpoint's workflow and may fail (503) while the rest answers.
    const [m, vs, eps, evs] = await Promise.all([
      settle(get<Model>(this.base, signal)),
      settle(get<ModelVersionList>(`${this.base}/versions`, signal)),
      settle(get<ModelServingList>(`${this.base}/endpoints`, signal)),
      settle(get<ModelAliasEventList>(`${this.base}/alias-events`, signal)),
    ]);
    if (signal.aborted || seq !== this.seq) return;
    if ("err" in m) {
      // What the page showed stays, under the error (a 404: the model is
      // not in this project).
      replace(this.problem, errorBox(m.err));
      if (!this.model) replace(this.headInfo);
    } else {
      replace(this.problem);
      this.show(m.ok, vs, eps, evs);
    }
    this.timer = window.setTimeout(() => void this.load(), REFRESH_MS);
  }

  /** show draws each part whose data changed (the alias form is never redrawn). */
  private show(m: Model, vs: Settled<ModelVersionList>, eps: Settled<ModelServingList>, evs: Settled<ModelAliasEventList>): void {
    this.model = m;
    this.body.hidden = false;
    if ("ok" in vs) this.versions = vs.ok.items;
    if ("ok" in eps) this.serving = eps.ok.items;
    this.part("head", [m.latest, m.description, m.createdAt, m.createdBy], () => replace(this.headInfo, this.facts(m)));
    this.part("aliases", [m.aliases, this.serving], () => replace(this.aliasesHost, this.aliasesBlock(m)));
    this.part("versions", settledKey(vs, m.latest), () => replace(this.versionsHost, "err" in vs ? errorBox(vs.err) : this.versionsBlock(m, vs.ok.items)));
    this.part("endpoints", settledKey(eps), () => replace(this.endpointsHost, "err" in eps ? errorBox(eps.err) : this.endpointsBlock(eps.ok.items)));
    this.part("history", settledKey(evs), () => replace(this.historyHost, "err" in evs ? errorBox(evs.err) : this.historyBlock(evs.ok.items)));
    this.versionOptions();
    this.followersHint();
  }

  private part(name: string, what: unknown, draw: () => void): void {
    const key = typeof what === "string" ? what : (JSON.stringify(what) ?? "");
    if (this.keys[name] === key) return;
    this.keys[name] = key;
    draw();
  }

  private facts(m: Model): HTMLElement {
    return h(
      "div",
      {},
      m.description ? h("p", { class: "desc", id: "model-description" }, m.description) : null,
      h(
        "dl",
        { class: "meta" },
        h("dt", {}, "Latest version"),
        h("dd", { id: "model-latest" }, m.latest ? versionText(m.latest) : h("span", { class: "muted" }, "none yet")),
        h("dt", {}, "Created"),
        h("dd", {}, fmtTime(m.createdAt), m.createdBy ? ` by ${m.createdBy}` : ""),
      ),
    );
  }

  /** followers are the endpoints that follow alias: they roll out the version it names when it moves. */
  private followers(alias: string): string[] {
    const ref = `${this.name}@${alias}`;
    return [...new Set(this.serving.filter((s) => s.follow && s.ref === ref).map((s) => s.endpoint))];
  }

  // ---- aliases ----

  private aliasesBlock(m: Model): HTMLElement {
    const aliases = Object.entries(m.aliases ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    if (!aliases.length) return h("p", { class: "muted", id: "no-aliases" }, "No alias names a version of this model.");
    const edit = canEdit();
    return h(
      "table",
      { class: "list compact", id: "aliases" },
      h("thead", {}, h("tr", {}, ["Alias", "Version", "Followed by", ...(edit ? [""] : [])].map((c) => h("th", {}, c)))),
      h(
        "tbody",
        {},
        aliases.map(([alias, v]) => {
          const follow = this.followers(alias);
          return h(
            "tr",
            { "data-alias": alias, "data-version": v },
            h("td", { class: "mono" }, alias),
            h("td", { class: "alias-version" }, versionText(v)),
            h("td", {}, follow.length ? follow.map((e, i) => [i ? ", " : null, h("a", { href: href.endpoint(this.project, e) }, e)]) : h("span", { class: "muted" }, "no endpoint")),
            edit ? h("td", { class: "nowrap" }, h("button", { type: "button", class: "danger small remove-alias", "data-alias": alias, onclick: () => this.askRemoveAlias(alias, v) }, "Remove…")) : null,
          );
        }),
      ),
    );
  }

  /** versionOptions lists the versions to point an alias at, newest first, keeping the one chosen. */
  private versionOptions(): void {
    const sel = this.versionSelect;
    const nums = this.versions.map((v) => v.version);
    this.setAliasBtn.disabled = this.sendingAlias || !nums.length;
    const have = [...sel.options].map((o) => Number(o.value));
    if (JSON.stringify(have) === JSON.stringify(nums)) return;
    const keep = Number(sel.value);
    replace(
      sel,
      nums.map((n) => h("option", { value: n }, `${versionText(n)}${n === this.model?.latest ? " (latest)" : ""}`)),
    );
    sel.value = String(nums.includes(keep) ? keep : (nums[0] ?? ""));
  }

  /** followersHint says, under the form, what moving the alias typed will roll out. */
  private followersHint(): void {
    const alias = this.aliasInput.value.trim();
    const follow = alias ? this.followers(alias) : [];
    replace(
      this.aliasHint,
      !this.versions.length
        ? "The model has no version to point an alias at yet."
        : follow.length
          ? `${follow.length === 1 ? "Endpoint" : "Endpoints"} ${follow.join(", ")} ${follow.length === 1 ? "follows" : "follow"} ${alias}: moving it rolls out the version it then names there (a new revision, with its rollout strategy and gates).`
          : "Points the alias at the version (creating it, or moving it from the version it named). Endpoints that follow the alias roll out the version it then names.",
    );
  }

  private async setAlias(): Promise<void> {
    const alias = this.aliasInput.value.trim();
    const version = Number(this.versionSelect.value);
    if (!alias || !version) return;
    setFieldError(this.aliasInput, this.aliasError);
    setFieldError(this.versionSelect, this.versionError);
    this.aliasFormError.hidden = true;
    replace(this.flash);
    const follow = this.followers(alias);
    this.sendingAlias = true;
    this.setAliasBtn.disabled = true;
    try {
      const body: ModelAliasUpdate = { version };
      await call<Model>("PUT", `${this.base}/aliases/${enc(alias)}`, body, this.abort.signal);
      this.aliasInput.value = "";
      this.followersHint();
      replace(
        this.flash,
        h(
          "div",
          { class: "alert info", role: "status", id: "alias-set" },
          `Alias ${alias} now names version ${version}.`,
          follow.length ? ` ${follow.join(", ")} ${follow.length === 1 ? "rolls" : "roll"} it out.` : "",
        ),
      );
      void this.load();
    } catch (e) {
      if (this.abort.signal.aborted) return;
      // Each error at its field (alias, version); the rest in the form.
      const loose: FieldError[] = [];
      for (const fe of e instanceof ApiError ? (e.problem.errors ?? []) : []) {
        // The alias is a path segment: the gateway's schema check says path.alias.
        if (fe.path === "alias" || fe.path === "path.alias") setFieldError(this.aliasInput, this.aliasError, fe.message);
        else if (fe.path === "version") setFieldError(this.versionSelect, this.versionError, fe.message);
        else loose.push(fe);
      }
      replace(this.aliasFormError, `Pointing ${alias} at version ${version} refused: ${message(e)}`, loose.length ? h("ul", {}, loose.map((fe) => h("li", {}, h("code", {}, fe.path), ": ", fe.message))) : null);
      this.aliasFormError.hidden = false;
    } finally {
      this.sendingAlias = false;
      this.setAliasBtn.disabled = !this.versions.length;
    }
  }

  private askRemoveAlias(alias: string, version: number): void {
    const follow = this.followers(alias);
    this.ask(
      `Remove the alias ${alias} (version ${version})? ${this.name}@${alias} stops resolving${follow.length ? `; ${follow.join(", ")} keep${follow.length === 1 ? "s" : ""} serving version ${version} and no longer follow${follow.length === 1 ? "s" : ""} a move` : ""}. The removal is recorded in the alias history.`,
      "Remove alias",
      async () => {
        await call<void>("DELETE", `${this.base}/aliases/${enc(alias)}`, undefined, this.abort.signal);
        return `Removed the alias ${alias}.`;
      },
    );
  }

  // ---- versions ----

  private versionsBlock(m: Model, versions: ModelVersion[]): HTMLElement {
    if (!versions.length) return h("p", { class: "empty", id: "no-versions" }, "No version.");
    const p = this.project;
    const edit = canEdit();
    return h(
      "table",
      { class: "list", id: "versions" },
      h("thead", {}, h("tr", {}, ["Version", "Aliases", "Artifact", "Size", "Run", "Step", "Created", "By", ...(edit ? [""] : [])].map((c) => h("th", {}, c)))),
      h(
        "tbody",
        {},
        versions.map((v) => {
          const a = v.artifact;
          const pr = a.producer;
          const step = `${pr.step}${pr.item !== undefined ? `[${pr.item}]` : ""}`;
          return h(
            "tr",
            { "data-version": v.version },
            h(
              "td",
              { class: "nowrap" },
              h("span", { class: "version-number" }, versionText(v.version)),
              v.version === m.latest ? h("span", { class: "role" }, "latest") : null,
              v.format ? h("span", { class: "pill", title: "serving format" }, v.format) : null,
            ),
            h("td", { class: "version-aliases" }, v.aliases.length ? h("span", { class: "chips" }, v.aliases.map((x) => h("span", { class: "chip mono" }, x))) : null),
            // The artifact's view is the drawer of the step that wrote it.
            h("td", {}, h("a", { class: "mono artifact-link", "data-artifact": a.id, href: href.run(p, pr.run, pr.step, pr.item), title: `artifact ${a.id}, ${a.digest}` }, `${a.id.slice(0, 12)}…`)),
            h("td", { class: "nowrap", title: `${a.size} bytes` }, fmtBytes(a.size), a.files !== undefined && a.files !== null ? h("span", { class: "muted" }, ` · ${a.files} ${a.files === 1 ? "file" : "files"}`) : null),
            h("td", { class: "nowrap" }, h("a", { class: "mono run-link", href: href.run(p, pr.run) }, pr.run)),
            h("td", { class: "nowrap" }, step, h("span", { class: "muted small" }, ` · attempt ${pr.attempt}`)),
            h("td", { class: "nowrap" }, fmtTime(v.createdAt)),
            // A pipeline's registration is by "run <id>": the run in the Run column.
            h("td", { class: "created-by" }, v.createdBy === `run ${pr.run}` ? h("span", { class: "muted", title: `${v.createdBy}: its step's output declares register` }, "its run") : v.createdBy),
            edit ? h("td", { class: "nowrap" }, h("button", { type: "button", class: "danger small delete-version", "data-version": v.version, onclick: () => this.askDeleteVersion(v) }, "Delete…")) : null,
          );
        }),
      ),
    );
  }

  private askDeleteVersion(v: ModelVersion): void {
    this.ask(
      `Delete version ${v.version} of ${this.name}? It stops resolving and is no longer listed, and its number is never given again; the artifact (${shortDigest(v.artifact.digest)}) stays with run ${v.artifact.producer.run}. The gateway refuses while an alias names it or an endpoint serves it.`,
      "Delete version",
      async () => {
        await call<void>("DELETE", `${this.base}/versions/${v.version}`, undefined, this.abort.signal);
        return `Deleted version ${v.version}.`;
      },
    );
  }

  // ---- endpoints and history ----

  private endpointsBlock(items: ModelServing[]): HTMLElement {
    if (!items.length)
      return h(
        "p",
        { class: "muted", id: "no-model-endpoints" },
        "No endpoint serves a version of this model. An endpoint serves one with ",
        h("code", {}, `model: {ref: ${this.name}@<alias>}`),
        " in its spec (",
        h("code", {}, "follow: true"),
        " to roll out the alias's moves).",
      );
    return h(
      "table",
      { class: "list compact", id: "model-endpoints" },
      h("thead", {}, h("tr", {}, ["Endpoint", "Revision", "Role", "Version", "Reference", "Follows the alias"].map((c) => h("th", {}, c)))),
      h(
        "tbody",
        {},
        items.map((s) =>
          h(
            "tr",
            { "data-endpoint": s.endpoint, "data-revision": s.revision, "data-role": s.role },
            h("td", {}, h("a", { href: href.endpoint(this.project, s.endpoint) }, s.endpoint)),
            h("td", { class: "mono" }, `r${s.revision}`),
            // stable serves the traffic; candidate is rolling out.
            h("td", {}, h("span", { class: s.role === "stable" ? "role serving" : "role candidate" }, s.role)),
            h("td", { class: "served-version" }, versionText(s.version)),
            h("td", {}, h("code", {}, s.ref)),
            h("td", { class: "follows" }, s.follow ? "yes" : "no"),
          ),
        ),
      ),
    );
  }

  private historyBlock(events: ModelAliasEvent[]): HTMLElement {
    if (!events.length) return h("p", { class: "muted", id: "no-alias-events" }, "No alias was set yet.");
    const v = (n: number | undefined, none: string) => (n === undefined ? h("span", { class: "muted" }, none) : versionText(n));
    return h(
      "table",
      { class: "list compact", id: "alias-events" },
      h("thead", {}, h("tr", {}, ["When", "Alias", "From", "To", "By"].map((c) => h("th", {}, c)))),
      h(
        "tbody",
        {},
        events.map((e) =>
          h(
            "tr",
            { "data-alias": e.alias, "data-from": e.from ?? "", "data-to": e.to ?? "" },
            h("td", { class: "nowrap" }, fmtTime(e.at)),
            h("td", { class: "mono" }, e.alias),
            h("td", {}, v(e.from, "new")),
            h("td", {}, v(e.to, "removed")),
            h("td", {}, e.actor),
          ),
        ),
      ),
    );
  }

  // ---- confirmations ----

  /** ask opens the confirmation: what will happen, and the button that does it; a refusal stays above the tables. */
  private ask(text: string, label: string, act: () => Promise<string>): void {
    replace(this.flash);
    const yes = h("button", { type: "submit", class: "danger", id: "confirm-model-yes" }, label);
    replace(this.confirm, h("span", { class: "confirm-text" }, text), yes, h("button", { type: "button", id: "confirm-model-no", onclick: () => (this.confirm.hidden = true) }, "Keep"));
    this.confirm.onsubmit = (ev: Event) => {
      ev.preventDefault();
      yes.disabled = true;
      act()
        .then((done) => {
          this.confirm.hidden = true;
          replace(this.flash, h("div", { class: "alert info", role: "status" }, done));
          void this.load();
        })
        .catch((e: unknown) => {
          if (this.abort.signal.aborted) return;
          yes.disabled = false;
          replace(this.flash, h("div", { class: "alert error", role: "alert" }, `${label} refused: ${message(e)}`));
        });
    };
    this.confirm.hidden = false;
    yes.focus();
  }
}

function setFieldError(input: HTMLInputElement | HTMLSelectElement, el: HTMLElement, msg?: string): void {
  el.textContent = msg ?? "";
  el.hidden = !msg;
  if (msg) input.setAttribute("aria-invalid", "true");
  else input.removeAttribute("aria-invalid");
}
