// The model registry (#/p/<project>/models): the project's models, by
// name, each with its latest version and its aliases, and for an editor a
// New model… form (POST …/models); and a model's page (…/models/<name>)
// with
//   - its aliases (alias → version) and, for an editor, a form that points
//     an alias at a version and a Remove button per alias;
//   - its versions, newest first: each is an artifact a step wrote, linked
//     to that step on its run's page (the drawer there shows the artifact,
//     its download and its lineage); an editor can delete one, and
//     register one (Register a version…: a run's output, listed from
//     GET …/runs/{run}/artifacts, or any artifact of the project by ID,
//     with an optional serving format and metadata);
//   - the endpoints whose revisions serve its versions (GET …/endpoints);
//   - who moved which alias when (GET …/alias-events).
//
// Moving an alias is not only bookkeeping: endpoints that follow the alias
// (model.follow) roll out the version it then names. The form says which
// endpoints follow the alias before it is sent. The gateway judges every
// change: deleting a version an alias names or an endpoint serves is a 409
// naming them, a version that does not exist a 422 at "version", an
// artifact that is not the project's a 422 at "artifact", a bad model name
// a 422 at "name" (a taken one a 409); each is shown where the action was,
// at its field when it has one. Viewers read, and are not offered the
// forms, Remove or Delete. Both pages refresh every few seconds; the forms
// are never redrawn, so what is typed in them stays.

import { ApiError, call, enc, get } from "../api";
import { type Child, fmtBytes, fmtTime, h, replace } from "../dom";
import { href } from "../route";
import { canEdit, roleNote } from "../session";
import type {
  Artifact,
  FieldError,
  Model,
  ModelAliasEvent,
  ModelAliasEventList,
  ModelAliasUpdate,
  ModelCreate,
  ModelList,
  ModelServing,
  ModelServingList,
  ModelVersion,
  ModelVersionCreate,
  ModelVersionList,
  RunArtifacts,
} from "../types";
import { shortDigest } from "./artifacts";
import { errorBox, message, type View } from "./view";

const REFRESH_MS = 5000;

const modelsPath = (project: string) => `/v1/projects/${enc(project)}/models`;

/** versionText is "v3". */
const versionText = (n: number | undefined) => (n === undefined ? "" : `v${n}`);

/** NAME is schema.ModelNamePattern (schema/modelref.go), the gateway's, for models and aliases. */
const NAME = /^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$/;
const NAME_RULE = "lowercase letters, digits, '.', '_' and '-'; at most 63; starts and ends with a letter or digit";

/** byName sorts [name, …] pairs by name. */
const byName = <T>([a]: [string, T], [b]: [string, T]) => (a < b ? -1 : a > b ? 1 : 0);

/** aliasChips shows a model's aliases, each with the version it names: "champion → v2". */
function aliasChips(aliases: Record<string, number> | undefined): HTMLElement | null {
  const all = Object.entries(aliases ?? {}).sort(byName);
  if (!all.length) return null;
  return h(
    "span",
    { class: "chips" },
    all.map(([a, v]) => h("span", { class: "chip mono", "data-alias": a, "data-version": v, title: `alias ${a} names version ${v}` }, `${a} → ${versionText(v)}`)),
  );
}

// ---- the list ----

export class ModelsPage implements View {
  readonly el = h("section", { class: "page models" });
  private readonly table = h("div", { class: "card table-card", id: "models-host" });
  private readonly problem = h("div", {});
  private readonly flash = h("div", { id: "models-flash" });
  private readonly abort = new AbortController();
  private readonly form?: NewModelForm;
  private timer?: number;
  /** What the table shows (JSON), so an unchanged refresh redraws nothing. */
  private shown = "";

  constructor(private readonly project: string) {
    const edit = canEdit();
    // A viewer is not offered the form (the gateway would refuse it).
    if (edit) this.form = new NewModelForm(modelsPath(project), this.abort.signal, (m) => this.onCreated(m));
    const open = h(
      "button",
      {
        type: "button",
        class: "primary",
        id: "new-model",
        onclick: () => {
          if (!this.form) return;
          this.form.el.hidden = !this.form.el.hidden;
          if (!this.form.el.hidden) this.form.focus();
        },
      },
      "New model…",
    );
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Models"), h("span", { class: "spacer" }), h("span", { class: "muted small" }, `refreshes every ${REFRESH_MS / 1000}s`), edit ? open : null),
      edit ? null : roleNote("editor", "Creating models and registering versions", "models-role-note"),
      h(
        "p",
        { class: "note" },
        "Each version of a model is an artifact a run wrote: a step output with ",
        h("code", {}, "register: <model>"),
        " adds the next version when the step succeeds, and a model's page registers any of the project's artifacts. Aliases (champion, candidate, …) name versions; endpoints serve ",
        h("code", {}, "<model>@<alias>"),
        ".",
      ),
      this.problem,
      this.form?.el,
      this.flash,
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
      this.form?.known(list.items);
      this.render(list.items);
    } catch (e) {
      if (signal.aborted) return;
      // What the table showed stays, under the error.
      replace(this.problem, errorBox(e));
      if (!this.shown) replace(this.table);
    }
    if (!signal.aborted) this.timer = window.setTimeout(() => void this.load(), REFRESH_MS);
  }

  private onCreated(m: Model): void {
    replace(
      this.flash,
      h(
        "div",
        { class: "alert info", role: "status", id: "model-created", "data-model": m.name },
        "Created the model ",
        h("a", { href: href.models(this.project, m.name) }, m.name),
        ". It has no version yet: register one on its page (a run's output), or let a pipeline's output with ",
        h("code", {}, `register: ${m.name}`),
        " add one.",
      ),
    );
    void this.load();
  }

  private render(items: Model[]): void {
    const key = JSON.stringify(items);
    if (key === this.shown) return;
    this.shown = key;
    const p = this.project;
    if (!items.length) {
      replace(
        this.table,
        h(
          "p",
          { class: "empty", id: "no-models" },
          "No model in this project yet. ",
          canEdit() ? "New model… above creates one; " : "",
          "a pipeline's output with ",
          h("code", {}, "register: <model>"),
          " creates it with its first version, as do ",
          h("code", {}, "atelier models"),
          " and ",
          h("code", {}, "POST /v1/projects/{project}/models"),
          ".",
        ),
      );
      return;
    }
    replace(
      this.table,
      h(
        "table",
        { class: "list", id: "models" },
        h("thead", {}, h("tr", {}, ["Model", "Latest version", "Aliases", "Description", "Created", "By"].map((c) => h("th", {}, c)))),
        h(
          "tbody",
          {},
          items.map((m) =>
            h(
              "tr",
              { "data-model": m.name },
              h("td", {}, h("a", { href: href.models(p, m.name) }, m.name)),
              h("td", { class: "latest" }, m.latest ? versionText(m.latest) : h("span", { class: "muted" }, "no version")),
              h("td", { class: "model-aliases" }, aliasChips(m.aliases)),
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
  private readonly register?: RegisterForm;
  /** The register form was opened for a model without versions (once: closing it keeps it closed). */
  private registerOffered = false;
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
    if (edit) this.register = new RegisterForm(project, name, this.abort.signal, (v, existed) => this.onRegistered(v, existed));
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
      // A viewer is not offered the forms, Remove and Delete (the gateway would refuse them).
      edit ? null : roleNote("editor", "Registering versions, setting and removing aliases and deleting versions", "model-role-note"),
      this.problem,
      this.confirm,
      this.flash,
      this.body,
    );
    replace(
      this.body,
      h("div", { class: "card", id: "aliases-card" }, h("div", { class: "card-title" }, h("h2", {}, "Aliases")), this.aliasesHost, edit ? aliasForm : null),
      this.register?.el,
      h(
        "div",
        { class: "card table-card", id: "versions-card" },
        h(
          "div",
          { class: "card-title pad" },
          h("h2", {}, "Versions"),
          h("span", { class: "muted small" }, "newest first"),
          this.register ? h("span", { class: "spacer" }) : null,
          this.register
            ? h(
                "button",
                {
                  type: "button",
                  class: "small",
                  id: "open-register",
                  onclick: () => {
                    if (!this.register) return;
                    this.register.el.hidden = !this.register.el.hidden;
                    if (!this.register.el.hidden) this.register.focus();
                  },
                },
                "Register a version…",
              )
            : null,
        ),
        this.versionsHost,
      ),
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
    if ("ok" in vs) {
      this.versions = vs.ok.items;
      this.register?.known(vs.ok.items);
      // A model without versions: the form is what the page is for.
      if (this.register && !vs.ok.items.length && !this.registerOffered) this.register.el.hidden = false;
      this.registerOffered = true;
    }
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
    const aliases = Object.entries(m.aliases ?? {}).sort(byName);
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

  private onRegistered(v: ModelVersion, existed: boolean): void {
    const a = v.artifact;
    replace(
      this.flash,
      h(
        "div",
        { class: "alert info", role: "status", id: "version-registered", "data-version": v.version },
        existed
          ? `The artifact ${a.id.slice(0, 12)}… already is version ${v.version} of ${this.name}: nothing changed.`
          : `Registered the artifact ${a.id.slice(0, 12)}… (${a.producer.step} of run ${a.producer.run}) as version ${v.version} of ${this.name}.`,
      ),
    );
    void this.load();
  }

  private versionsBlock(m: Model, versions: ModelVersion[]): HTMLElement {
    if (!versions.length)
      return h(
        "p",
        { class: "empty", id: "no-versions" },
        "No version yet. ",
        canEdit() ? "Register a version… takes a run's output (or any artifact of the project); " : "",
        "a pipeline's output with ",
        h("code", {}, `register: ${this.name}`),
        " adds one when its step succeeds.",
      );
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

// ---- the forms: New model (the list) and Register a version (a model's page) ----

interface Field {
  el: HTMLElement;
  control: HTMLElement;
  error: HTMLElement;
}

/**
 * Fields lays out a form's fields (a label, the control, a hint, the
 * error) and shows errors at them: the error of field key is
 * #<prefix>-<key>-error.
 */
class Fields {
  private readonly all = new Map<string, Field>();

  constructor(private readonly prefix: string) {}

  field(key: string, label: string, control: HTMLElement, hint?: Child): HTMLElement {
    const error = h("p", { class: "field-error", id: `${this.prefix}-${key}-error`, role: "alert", hidden: true });
    // A control made of several (an input and its buttons) is a group, not one label.
    const one = control instanceof HTMLInputElement || control instanceof HTMLTextAreaElement || control instanceof HTMLSelectElement;
    const row = one ? h("label", { class: "field-row" }) : h("div", { class: "field-row", role: "group", "aria-label": label });
    row.append(h("span", { class: "field-label" }, label), control);
    const el = h("div", { class: "field", "data-field": key }, row, hint ? (hint instanceof HTMLElement ? hint : h("p", { class: "hint" }, hint)) : null, error);
    this.all.set(key, { el, control, error });
    const clear = () => this.set(key);
    control.addEventListener("input", clear);
    control.addEventListener("change", clear);
    return el;
  }

  has(key: string): boolean {
    return this.all.has(key);
  }

  /** set shows msg at the field (added to what it shows); no msg clears it. */
  set(key: string, msg?: string): void {
    const f = this.all.get(key);
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

  clear(): void {
    for (const k of this.all.keys()) this.set(k);
  }

  focus(key: string): void {
    const c = this.all.get(key)?.control;
    (c?.matches("input, textarea, select") ? c : c?.querySelector<HTMLElement>("input, textarea, select"))?.focus();
  }
}

/**
 * showProblem puts each error of the gateway's problem at its field (fieldOf
 * says which; a 409's detail goes to conflictAt) and the rest under the
 * form, in formError; it returns the first field marked.
 */
function showProblem(e: unknown, fields: Fields, formError: HTMLElement, what: string, fieldOf: (path: string) => string | undefined, conflictAt?: string): string | undefined {
  const errs = e instanceof ApiError ? (e.problem.errors ?? []) : [];
  const loose: FieldError[] = [];
  let first: string | undefined;
  if (conflictAt && e instanceof ApiError && e.status === 409) {
    fields.set(conflictAt, message(e));
    first = conflictAt;
  }
  for (const fe of errs) {
    const key = fieldOf(fe.path);
    if (!key) {
      loose.push(fe);
      continue;
    }
    // Said with its path where the field holds several (metadata.x).
    fields.set(key, fe.path === key ? fe.message : `${fe.path}: ${fe.message}`);
    first ??= key;
  }
  const status = e instanceof ApiError ? ` (HTTP ${e.status})` : "";
  replace(
    formError,
    h(
      "div",
      { class: "alert error", role: "alert" },
      first && !loose.length ? `The gateway refused ${what}${status}: see the fields marked above.` : `The gateway refused ${what}: ${message(e)}`,
      loose.length ? h("ul", {}, loose.map((fe) => h("li", {}, h("code", {}, fe.path || "(request)"), ": ", fe.message))) : null,
    ),
  );
  formError.hidden = false;
  if (first) fields.focus(first);
  return first;
}

/** jsonObject parses text as a JSON object (empty text: undefined), or says why it is not one. */
function jsonObject(text: string): { ok: Record<string, unknown> | undefined } | { err: string } {
  if (!text.trim()) return { ok: undefined };
  try {
    const v: unknown = JSON.parse(text);
    if (v === null || typeof v !== "object" || Array.isArray(v)) return { err: "not a JSON object: write {\"key\": value, …}" };
    return { ok: v as Record<string, unknown> };
  } catch (e) {
    return { err: `not a JSON object: ${e instanceof Error ? e.message : String(e)}` };
  }
}

/**
 * NewModelForm sends POST …/models {name, description}: a model without
 * versions. It says before sending whether the name is taken or not a
 * model name; the gateway judges (a 422 at name, a 409 for a taken one).
 */
class NewModelForm {
  readonly el: HTMLFormElement;
  private readonly fields = new Fields("new-model");
  private readonly name = h("input", { id: "new-model-name", name: "name", autocomplete: "off", spellcheck: "false", maxlength: 63, placeholder: "fraud-detector" });
  private readonly description = h("input", { id: "new-model-description", name: "description", autocomplete: "off", maxlength: 1000, placeholder: "optional: what it predicts, from what" });
  private readonly hint = h("p", { class: "hint", id: "new-model-hint" });
  private readonly formError = h("div", { class: "form-error", id: "new-model-form-error", hidden: true });
  private readonly submit = h("button", { type: "submit", class: "primary", id: "create-model" }, "Create model");
  private models: Model[] = [];
  private sending = false;

  constructor(
    private readonly base: string,
    private readonly signal: AbortSignal,
    private readonly created: (m: Model) => void,
  ) {
    this.name.addEventListener("input", () => this.describe());
    this.el = h(
      "form",
      {
        class: "card model-form",
        id: "new-model-form",
        hidden: true,
        novalidate: true,
        onsubmit: ((ev: Event) => {
          ev.preventDefault();
          void this.send();
        }) as EventListener,
      },
      h("h2", {}, "New model"),
      h("p", { class: "hint" }, "A name to register versions under: a run's output on the model's page, or a pipeline's output with register: <name>. The model starts without versions or aliases."),
      this.fields.field("name", "Name", this.name, this.hint),
      this.fields.field("description", "Description", this.description),
      this.formError,
      h(
        "div",
        { class: "actions" },
        this.submit,
        " ",
        h(
          "button",
          {
            type: "button",
            id: "new-model-cancel",
            onclick: () => {
              this.el.hidden = true;
            },
          },
          "Cancel",
        ),
      ),
    );
    // What the gateway said of what was sent goes once the form changes.
    this.el.addEventListener("input", () => (this.formError.hidden = true));
    this.describe();
  }

  focus(): void {
    this.name.focus();
  }

  /** known takes the models listed, to say whether a name is taken. */
  known(items: Model[]): void {
    this.models = items;
    this.describe();
  }

  private describe(): void {
    const name = this.name.value.trim();
    const had = this.models.find((m) => m.name === name);
    if (had) replace(this.hint, `${name} exists already (${had.latest ? `latest version ${had.latest}` : "no version yet"}): register versions on its page.`);
    else if (name && !NAME.test(name)) replace(this.hint, `Not a model name: ${NAME_RULE}.`);
    else replace(this.hint, `${NAME_RULE}. Endpoints name it as <name>@<alias>.`);
  }

  private async send(): Promise<void> {
    if (this.sending) return;
    this.fields.clear();
    this.formError.hidden = true;
    const name = this.name.value.trim();
    if (!name) {
      this.fields.set("name", "Give the model a name.");
      this.name.focus();
      return;
    }
    const body: ModelCreate = { name };
    const description = this.description.value.trim();
    if (description) body.description = description;
    this.sending = true;
    this.submit.disabled = true;
    try {
      const m = await call<Model>("POST", this.base, body, this.signal);
      this.el.reset();
      this.el.hidden = true;
      this.models = [...this.models, m];
      this.describe();
      this.created(m);
    } catch (e) {
      if (this.signal.aborted) return;
      showProblem(e, this.fields, this.formError, `the model ${name}`, (path) => (this.fields.has(path) ? path : undefined), "name");
    } finally {
      this.sending = false;
      this.submit.disabled = false;
    }
  }
}

/**
 * RegisterForm sends POST …/models/{m}/versions {artifact, format,
 * metadata}: one of the project's artifacts becomes the model's next
 * version. The artifact is chosen from a run's outputs (GET
 * …/runs/{run}/artifacts lists what its steps wrote) or given by ID. It
 * says before sending what the artifact is and whether it already is a
 * version (the gateway then answers that version, 200, and changes
 * nothing); the metadata must be a JSON object. The gateway judges the
 * rest: an artifact that is not the project's is a 422 at artifact.
 */
class RegisterForm {
  readonly el: HTMLFormElement;
  private readonly fields = new Fields("register");
  private readonly run = h("input", { id: "register-run", name: "run", autocomplete: "off", spellcheck: "false", placeholder: "run ID", "aria-label": "run" });
  private readonly listBtn = h("button", { type: "button", id: "register-list" }, "List its outputs");
  private readonly output = h("select", { id: "register-output", "aria-label": "the run's output", hidden: true });
  private readonly artifact = h("input", { id: "register-artifact", class: "mono", name: "artifact", autocomplete: "off", spellcheck: "false", placeholder: "an artifact ID of this project" });
  private readonly format = h("input", { id: "register-format", name: "format", autocomplete: "off", spellcheck: "false", maxlength: 100, placeholder: "optional: vllm, triton, …" });
  private readonly metadata = h("textarea", { id: "register-metadata", name: "metadata", rows: 3, spellcheck: "false", placeholder: '{"dataset": "reviews-2025-06", "auc": 0.93}' });
  private readonly about = h("p", { class: "hint", id: "register-about" });
  private readonly formError = h("div", { class: "form-error", id: "register-form-error", hidden: true });
  private readonly submit = h("button", { type: "submit", class: "primary", id: "register-submit" }, "Register version");
  /** What the run listed wrote. */
  private produced: Artifact[] = [];
  private versions: ModelVersion[] = [];
  private sending = false;

  constructor(
    private readonly project: string,
    private readonly model: string,
    private readonly signal: AbortSignal,
    private readonly registered: (v: ModelVersion, existed: boolean) => void,
  ) {
    this.listBtn.addEventListener("click", () => void this.listOutputs());
    this.run.addEventListener("keydown", (ev) => {
      // Enter in the run field lists its outputs rather than sending the form.
      if (ev.key === "Enter") {
        ev.preventDefault();
        void this.listOutputs();
      }
    });
    this.output.addEventListener("change", () => {
      if (this.output.value) this.artifact.value = this.output.value;
      this.fields.set("artifact");
      this.describe();
    });
    this.artifact.addEventListener("input", () => {
      const id = this.artifact.value.trim();
      this.output.value = this.produced.some((a) => a.id === id) ? id : "";
      this.describe();
    });
    this.el = h(
      "form",
      {
        class: "card model-form",
        id: "register-form",
        hidden: true,
        novalidate: true,
        onsubmit: ((ev: Event) => {
          ev.preventDefault();
          void this.send();
        }) as EventListener,
      },
      h("h2", {}, "Register a version"),
      h("p", { class: "hint" }, `One of the project's artifacts becomes the next version of ${model}: a file or directory a step wrote, with its lineage back to its run.`),
      this.fields.field("run", "From a run", h("span", { class: "run-pick" }, this.run, this.listBtn, this.output), "a run of this project: lists what its steps wrote, to choose the output to register"),
      this.fields.field("artifact", "Artifact", this.artifact, this.about),
      this.fields.field("format", "Serving format", this.format, "a hint for serving (free text); empty: none"),
      this.fields.field("metadata", "Metadata", this.metadata, "optional: a JSON object kept with the version (what it was trained on, its scores, …)"),
      this.formError,
      h(
        "div",
        { class: "actions" },
        this.submit,
        " ",
        h(
          "button",
          {
            type: "button",
            id: "register-cancel",
            onclick: () => {
              this.el.hidden = true;
            },
          },
          "Cancel",
        ),
      ),
    );
    // What the gateway said of what was sent goes once the form changes.
    this.el.addEventListener("input", () => (this.formError.hidden = true));
    this.output.addEventListener("change", () => (this.formError.hidden = true));
    this.describe();
  }

  focus(): void {
    (this.artifact.value ? this.submit : this.run).focus();
  }

  /** known takes the model's versions, to say which artifacts already are one. */
  known(versions: ModelVersion[]): void {
    if (JSON.stringify(versions.map((v) => [v.version, v.artifact.id])) === JSON.stringify(this.versions.map((v) => [v.version, v.artifact.id]))) return;
    this.versions = versions;
    if (this.produced.length) this.outputOptions();
    this.describe();
  }

  /** versionOf is the version an artifact already is, if any. */
  private versionOf(id: string): number | undefined {
    return this.versions.find((v) => v.artifact.id === id)?.version;
  }

  private outputText(a: Artifact): string {
    const pr = a.producer;
    const step = `${pr.step}${pr.item !== undefined ? `[${pr.item}]` : ""}`;
    const v = this.versionOf(a.id);
    return `${step} · ${a.name} · ${a.type} · ${fmtBytes(a.size)} · ${shortDigest(a.digest)}${v !== undefined ? ` (already ${versionText(v)})` : ""}`;
  }

  private outputOptions(): void {
    const keep = this.output.value;
    const n = this.produced.length;
    replace(
      this.output,
      h("option", { value: "" }, `${n} ${n === 1 ? "output" : "outputs"}: choose one`),
      this.produced.map((a) => h("option", { value: a.id, "data-step": a.producer.step, "data-output": a.name }, this.outputText(a))),
    );
    this.output.value = keep;
  }

  private async listOutputs(): Promise<void> {
    const run = this.run.value.trim();
    this.fields.set("run");
    if (!run) {
      this.fields.set("run", "Give a run ID: its page (and the versions above) show it.");
      this.run.focus();
      return;
    }
    this.listBtn.disabled = true;
    try {
      const ra = await get<RunArtifacts>(`/v1/projects/${enc(this.project)}/runs/${enc(run)}/artifacts`, this.signal);
      this.produced = ra.produced;
      if (!ra.produced.length) {
        this.output.hidden = true;
        this.fields.set("run", `Run ${run} wrote no artifact (yet: a step that just ended may take a moment to appear).`);
        return;
      }
      this.output.value = "";
      this.outputOptions();
      this.output.hidden = false;
      // A model output not yet a version is what one registers; a run
      // that wrote one artifact leaves no choice.
      const pick = ra.produced.find((a) => a.type === "model" && this.versionOf(a.id) === undefined) ?? (ra.produced.length === 1 ? ra.produced[0] : undefined);
      if (pick) {
        this.output.value = pick.id;
        this.artifact.value = pick.id;
        this.fields.set("artifact");
      }
      this.describe();
      this.output.focus();
    } catch (e) {
      if (this.signal.aborted) return;
      this.produced = [];
      this.output.hidden = true;
      this.fields.set("run", `Listing the outputs of ${run} refused: ${message(e)}`);
    } finally {
      this.listBtn.disabled = false;
    }
  }

  /** describe says what the artifact chosen is and what registering it does. */
  private describe(): void {
    const id = this.artifact.value.trim();
    if (!id) {
      replace(this.about, "Choose a run's output above, or give an artifact ID (", h("code", {}, "atelier artifacts ls RUN"), " lists a run's).");
      return;
    }
    const a = this.produced.find((x) => x.id === id);
    const what = a ? `Step ${a.producer.step}${a.producer.item !== undefined ? `[${a.producer.item}]` : ""} of run ${a.producer.run} wrote ${a.name} (${a.type}, ${fmtBytes(a.size)}, ${shortDigest(a.digest)}). ` : "";
    const v = this.versionOf(id);
    replace(
      this.about,
      what,
      v !== undefined ? `It already is version ${v} of ${this.model}: registering it again changes nothing.` : `Registering makes it the next version of ${this.model}.`,
    );
  }

  private async send(): Promise<void> {
    if (this.sending) return;
    this.fields.clear();
    this.formError.hidden = true;
    const artifact = this.artifact.value.trim();
    // What cannot be sent at all is said here.
    let first: string | undefined;
    if (!artifact) {
      this.fields.set("artifact", "Choose a run's output, or give an artifact ID.");
      first = "artifact";
    }
    const meta = jsonObject(this.metadata.value);
    if ("err" in meta) {
      this.fields.set("metadata", meta.err);
      first ??= "metadata";
    }
    if (first || "err" in meta) {
      this.fields.focus(first ?? "metadata");
      return;
    }
    const body: ModelVersionCreate = { artifact };
    const format = this.format.value.trim();
    if (format) body.format = format;
    if (meta.ok) body.metadata = meta.ok;
    const before = new Set(this.versions.map((v) => v.version));
    this.sending = true;
    this.submit.disabled = true;
    try {
      const v = await call<ModelVersion>("POST", `${modelsPath(this.project)}/${enc(this.model)}/versions`, body, this.signal);
      this.el.reset();
      this.produced = [];
      this.output.hidden = true;
      this.el.hidden = true;
      this.describe();
      this.registered(v, before.has(v.version));
    } catch (e) {
      if (this.signal.aborted) return;
      showProblem(e, this.fields, this.formError, `the registration`, (path) => {
        if (path === "metadata" || path.startsWith("metadata.") || path.startsWith("metadata[") || path.startsWith("metadata/")) return "metadata";
        return path === "artifact" || path === "format" ? path : undefined;
      });
    } finally {
      this.sending = false;
      this.submit.disabled = false;
    }
  }
}
