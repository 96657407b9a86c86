// Secrets (#/p/<project>/secrets): the project's secrets, by name, each
// with its version, when and by which token it was last written, and when
// it was created. Values are write-only: no route returns one, so the page
// never shows one either.
//
// An editor also gets a form that creates or replaces a secret (PUT
// …/secrets/{name} {"value"}), Replace… and Delete… per secret (Delete asks
// first), and the secrets audit (GET …/secret-events). The value is typed
// into a password field, or read from a file (for a value of several
// lines, such as a credentials file); it goes only into the PUT's body,
// never into a URL, the page or the console, and the field is emptied once
// the gateway has stored it. The name is checked against the gateway's
// pattern before sending; the gateway judges the rest, and each error of
// its problem is shown at its field with the error's path. Viewers read
// the list and are not offered the form, Replace, Delete or the audit
// (which needs an editor). A gateway without a secrets key answers 503:
// the page says what that means and offers nothing. The list refreshes
// every few seconds; the form is never redrawn, so what is typed stays.

import { ApiError, call, enc, get, query } from "../api";
import { fmtTime, h, replace } from "../dom";
import { canEdit, roleNote } from "../session";
import type { FieldError, Secret, SecretEvent, SecretEventList, SecretList, SecretValue } from "../types";
import { message, type View } from "./view";

const REFRESH_MS = 5000;
/** How many lines of the audit the page shows. */
const EVENTS = 20;
/** A secret's value is at most 64 KiB (the gateway's limit): a larger file is not read. */
const MAX_VALUE = 64 << 10;

/** NAME is schema.SecretNamePattern (schema/secrets.go), the gateway's. */
const NAME = /^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$/;
const NAME_RULE = "lowercase letters, digits, '.', '_' and '-'; at most 63; starts and ends with a letter or digit";

const secretsPath = (project: string) => `/v1/projects/${enc(project)}/secrets`;

/** problemBox is errorBox, with what a 403 or 503 means here. */
function problemBox(e: unknown, prefix = ""): HTMLElement {
  const box = h("div", { class: "alert error", role: "alert", "data-status": e instanceof ApiError ? e.status : "" }, prefix, message(e));
  if (e instanceof ApiError && e.status === 503)
    box.append(
      h(
        "div",
        { class: "hint", id: "secrets-no-key" },
        "This gateway has no secrets key, so it stores no secrets and steps cannot be given any: its operator sets ATELIER_SECRETS_KEY_URL (docs/operations.md, Secrets; make dev makes a key).",
      ),
    );
  if (e instanceof ApiError && e.status === 403) box.append(h("div", { class: "hint" }, "Viewers read the secrets' names; setting, replacing and deleting them needs an editor token of this project (or an admin's)."));
  return box;
}

const versionText = (n: number) => `v${n}`;

export class SecretsPage implements View {
  readonly el = h("section", { class: "page secrets" });
  private readonly table = h("div", { class: "card table-card", id: "secrets-host" });
  private readonly problem = h("div", { id: "secrets-error" });
  private readonly flash = h("div", { id: "secrets-flash" });
  private readonly confirm = h("form", { class: "confirm", id: "confirm-secret", hidden: true });
  private readonly eventsCard = h("div", { class: "card table-card", id: "secret-events-card", hidden: true });
  private readonly eventsHost = h("div", { id: "secret-events-host" });
  private readonly abort = new AbortController();
  private readonly form?: SecretForm;
  private timer?: number;
  private seq = 0;
  /** What the table and the audit show (JSON), so an unchanged refresh redraws nothing. */
  private shown = "";
  private shownEvents = "";

  constructor(private readonly project: string) {
    const edit = canEdit();
    // A viewer is not offered the form, Replace or Delete (the gateway would refuse them).
    if (edit) this.form = new SecretForm(secretsPath(project), this.abort.signal, (s, created) => this.onSaved(s, created));
    replace(
      this.eventsCard,
      h("div", { class: "card-title pad" }, h("h2", {}, "History"), h("span", { class: "muted small" }, `who created, replaced and deleted which secret; newest first, the last ${EVENTS}`)),
      this.eventsHost,
    );
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Secrets"), h("span", { class: "spacer" }), h("span", { class: "muted small" }, `refreshes every ${REFRESH_MS / 1000}s`)),
      edit ? null : roleNote("editor", "Setting, replacing and deleting secrets", "secrets-role-note"),
      h(
        "p",
        { class: "note" },
        "Named values that steps and endpoints receive as environment variables or files (",
        h("code", {}, "container.secrets: [{name: db-password, env: DB_PASSWORD}]"),
        "). Values are write-only: the gateway never returns one, so this page shows each secret's name, version and last writer, never its value.",
      ),
      this.problem,
      this.form?.el,
      this.confirm,
      this.flash,
      this.table,
      this.eventsCard,
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
    const seq = ++this.seq;
    const signal = this.abort.signal;
    const base = secretsPath(this.project);
    try {
      const list = await get<SecretList>(base, signal);
      // The audit needs an editor: a viewer does not ask (nor does anyone
      // when the list failed: a gateway without a key answers both 503).
      const events = canEdit()
        ? await get<SecretEventList>(`/v1/projects/${enc(this.project)}/secret-events${query({ pageSize: EVENTS })}`, signal).then(
            (r) => r.items,
            (e: unknown) => (e instanceof Error ? e : new Error(String(e))),
          )
        : undefined;
      if (signal.aborted || seq !== this.seq) return;
      replace(this.problem);
      this.form?.known(list.items);
      this.render(list.items);
      if (events !== undefined) this.renderEvents(events);
    } catch (e) {
      if (signal.aborted || seq !== this.seq) return;
      replace(this.problem, problemBox(e));
      // Without a secrets key (503) or the role to read (403) there is
      // nothing to show or set, and there will not be in 5 s either.
      if (e instanceof ApiError && (e.status === 503 || e.status === 403)) {
        replace(this.table);
        this.table.hidden = true;
        if (this.form) this.form.el.hidden = true;
        this.eventsCard.hidden = true;
        this.shown = "";
        return;
      }
      // A refresh that fails keeps what the table showed, under the error.
      if (!this.shown) replace(this.table);
    }
    if (!signal.aborted && seq === this.seq) this.timer = window.setTimeout(() => void this.load(), REFRESH_MS);
  }

  private onSaved(s: Secret, created: boolean): void {
    replace(
      this.flash,
      h(
        "div",
        { class: "alert info", role: "status", id: "secret-saved", "data-secret": s.name, "data-version": s.version },
        created ? `Created the secret ${s.name} (version ${s.version}).` : `Replaced the value of ${s.name}: now version ${s.version}. Steps that start from now on get the new value.`,
      ),
    );
    this.confirm.hidden = true;
    void this.load();
  }

  private render(items: Secret[]): void {
    const edit = canEdit();
    const key = JSON.stringify(items);
    if (key === this.shown) return;
    this.shown = key;
    this.table.hidden = false;
    if (!items.length) {
      replace(
        this.table,
        h(
          "p",
          { class: "empty", id: "no-secrets" },
          "No secret in this project yet. ",
          edit ? "Create one with the form above, " : "An editor creates them here, ",
          "with ",
          h("code", {}, "atelier secrets set NAME"),
          " or with ",
          h("code", {}, "PUT /v1/projects/{project}/secrets/{name}"),
          ".",
        ),
      );
      return;
    }
    replace(
      this.table,
      h(
        "table",
        { class: "list", id: "secrets" },
        h("thead", {}, h("tr", {}, ["Name", "Version", "Last written", "By", "Created", ...(edit ? [""] : [])].map((c) => h("th", {}, c)))),
        h(
          "tbody",
          {},
          items.map((s) =>
            h(
              "tr",
              { "data-secret": s.name, "data-version": s.version },
              h("td", { class: "mono secret-name" }, s.name),
              h("td", { class: "secret-version", title: "1 when created, +1 on every replacement" }, versionText(s.version)),
              h("td", { class: "nowrap secret-updated" }, fmtTime(s.updatedAt)),
              h("td", { class: "secret-by" }, s.updatedBy),
              h("td", { class: "nowrap secret-created" }, fmtTime(s.createdAt)),
              edit
                ? h(
                    "td",
                    { class: "nowrap actions-cell" },
                    h("button", { type: "button", class: "small replace-secret", "data-secret": s.name, onclick: () => this.form?.replacing(s.name) }, "Replace…"),
                    " ",
                    h("button", { type: "button", class: "danger small delete-secret", "data-secret": s.name, onclick: () => this.askDelete(s) }, "Delete…"),
                  )
                : null,
            ),
          ),
        ),
      ),
    );
  }

  private renderEvents(events: SecretEvent[] | Error): void {
    this.eventsCard.hidden = false;
    const key = events instanceof Error ? `error: ${message(events)}` : JSON.stringify(events);
    if (key === this.shownEvents) return;
    this.shownEvents = key;
    if (events instanceof Error) {
      replace(this.eventsHost, h("div", { class: "pad-box" }, problemBox(events)));
      return;
    }
    if (!events.length) {
      replace(this.eventsHost, h("p", { class: "empty", id: "no-secret-events" }, "Nothing was written yet."));
      return;
    }
    replace(
      this.eventsHost,
      h(
        "table",
        { class: "list compact", id: "secret-events" },
        h("thead", {}, h("tr", {}, ["When", "Secret", "Action", "By"].map((c) => h("th", {}, c)))),
        h(
          "tbody",
          {},
          events.map((e) =>
            h(
              "tr",
              { "data-secret": e.name, "data-action": e.action },
              h("td", { class: "nowrap" }, fmtTime(e.at)),
              h("td", { class: "mono" }, e.name),
              h("td", {}, h("span", { class: "secret-action", "data-action": e.action }, e.action)),
              h("td", {}, e.actor),
            ),
          ),
        ),
      ),
    );
  }

  /** askDelete opens the confirmation: what deleting the secret does, and the button that does it. */
  private askDelete(s: Secret): void {
    replace(this.flash);
    const yes = h("button", { type: "submit", class: "danger", id: "confirm-secret-yes" }, "Delete secret");
    replace(
      this.confirm,
      h(
        "span",
        { class: "confirm-text" },
        `Delete the secret ${s.name} (version ${s.version})? Steps that reference it fail from then on, and endpoint replicas that start later wait for it. Its value cannot be read back, so it is gone for good.`,
      ),
      yes,
      h("button", { type: "button", id: "confirm-secret-no", onclick: () => (this.confirm.hidden = true) }, "Keep"),
    );
    this.confirm.dataset.secret = s.name;
    this.confirm.onsubmit = (ev: Event) => {
      ev.preventDefault();
      yes.disabled = true;
      call<void>("DELETE", `${secretsPath(this.project)}/${enc(s.name)}`, undefined, this.abort.signal)
        .then(() => {
          this.confirm.hidden = true;
          replace(this.flash, h("div", { class: "alert info", role: "status", id: "secret-deleted", "data-secret": s.name }, `Deleted the secret ${s.name}.`));
          void this.load();
        })
        .catch((e: unknown) => {
          if (this.abort.signal.aborted) return;
          yes.disabled = false;
          replace(this.flash, problemBox(e, `Deleting ${s.name} refused: `));
        });
    };
    this.confirm.hidden = false;
    this.confirm.scrollIntoView({ block: "nearest" });
    yes.focus();
  }
}

/**
 * SecretForm sends PUT …/secrets/{name}. It says before sending whether
 * the name creates a secret or replaces one (and which version that makes);
 * the value is never shown, and is emptied once stored.
 */
class SecretForm {
  readonly el: HTMLFormElement;
  private readonly name = h("input", { id: "secret-name", name: "name", autocomplete: "off", spellcheck: "false", maxlength: 63, placeholder: "db-password", "aria-label": "secret name" });
  private readonly value = h("input", {
    id: "secret-value",
    type: "password",
    name: "value",
    // Not a sign-in password: no autofill, and nothing for the browser to offer to save.
    autocomplete: "new-password",
    spellcheck: "false",
    placeholder: "the value (write-only)",
    "aria-label": "secret value",
  });
  private readonly file = h("input", { id: "secret-file", type: "file", name: "file", "aria-label": "read the value from a file" });
  private readonly fileNote = h("span", { class: "muted small", id: "secret-file-note" });
  private readonly clearFile = h("button", { type: "button", class: "small", id: "secret-file-clear", hidden: true }, "Type it instead");
  private readonly nameError = h("p", { class: "field-error", id: "secret-name-error", role: "alert", hidden: true });
  private readonly valueError = h("p", { class: "field-error", id: "secret-value-error", role: "alert", hidden: true });
  private readonly formError = h("div", { class: "form-error", id: "secret-form-error", hidden: true });
  private readonly hint = h("p", { class: "hint", id: "secret-form-hint" });
  private readonly submit = h("button", { type: "submit", class: "primary", id: "save-secret" }, "Create secret");
  private secrets: Secret[] = [];
  /** The text of the file chosen (the value), until it is stored or another is chosen. */
  private fileValue?: string;
  private sending = false;

  constructor(
    private readonly base: string,
    private readonly signal: AbortSignal,
    private readonly saved: (s: Secret, created: boolean) => void,
  ) {
    this.name.addEventListener("input", () => {
      setFieldError(this.name, this.nameError);
      this.describe();
    });
    this.value.addEventListener("input", () => setFieldError(this.value, this.valueError));
    this.file.addEventListener("change", () => void this.readFile());
    this.clearFile.addEventListener("click", () => this.forgetFile());
    this.el = h(
      "form",
      {
        class: "card secret-form",
        id: "secret-form",
        novalidate: true,
        onsubmit: ((ev: Event) => {
          ev.preventDefault();
          void this.send();
        }) as EventListener,
      },
      h("div", { class: "card-title" }, h("h2", {}, "Set a secret"), h("span", { class: "muted small" }, "creates it, or replaces the value of the one of that name")),
      h(
        "div",
        { class: "secret-fields" },
        h("label", {}, "Name ", this.name),
        h("label", {}, "Value ", this.value),
        h("span", { class: "secret-file" }, h("label", { class: "file-label" }, "or from a file ", this.file), this.fileNote, this.clearFile),
        this.submit,
      ),
      this.nameError,
      this.valueError,
      this.hint,
      h(
        "p",
        { class: "hint" },
        "The value goes to the gateway only, sealed before it is stored; it is never shown again, here or anywhere. A file's text becomes the value (one trailing newline dropped, as ",
        h("code", {}, "atelier secrets set --from-file"),
        " does): for a value of several lines, such as a credentials file.",
      ),
      this.formError,
    );
    this.describe();
  }

  /** known takes the secrets listed, to say whether a name creates or replaces one. */
  known(items: Secret[]): void {
    this.secrets = items;
    this.describe();
  }

  /** replacing fills in name (a Replace… button) and puts the cursor in the value. */
  replacing(name: string): void {
    this.name.value = name;
    setFieldError(this.name, this.nameError);
    this.formError.hidden = true;
    this.describe();
    this.el.scrollIntoView({ block: "nearest" });
    (this.fileValue === undefined ? this.value : this.file).focus();
  }

  /** describe says what saving does with the name typed: create it, or replace which version. */
  private describe(): void {
    const name = this.name.value.trim();
    const had = this.secrets.find((s) => s.name === name);
    this.submit.textContent = had ? "Replace value" : "Create secret";
    this.el.dataset.mode = had ? "replace" : "create";
    if (had)
      replace(
        this.hint,
        `${name} exists (version ${had.version}, last written by ${had.updatedBy} at ${fmtTime(had.updatedAt)}): saving replaces its value, making version ${had.version + 1}. Steps that start from then on get the new value; endpoint replicas get it when they restart.`,
      );
    else if (name && NAME.test(name)) replace(this.hint, `Creates the secret ${name} (version 1).`);
    else replace(this.hint, `A name: ${NAME_RULE}.`);
  }

  private async readFile(): Promise<void> {
    setFieldError(this.value, this.valueError);
    const f = this.file.files?.[0];
    if (!f) {
      this.forgetFile();
      return;
    }
    this.fileValue = undefined;
    if (f.size > MAX_VALUE + 2) {
      // Not read: it could not be a secret's value (a trailing newline aside).
      this.file.value = "";
      setFieldError(this.value, this.valueError, `${f.name} has ${f.size} bytes; a secret's value is at most ${MAX_VALUE} bytes (64 KiB).`);
      this.showFile();
      return;
    }
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(await f.arrayBuffer());
    } catch {
      this.file.value = "";
      setFieldError(this.value, this.valueError, `${f.name} is not UTF-8 text; a secret's value is text (it becomes an environment variable or a file of that text).`);
      this.showFile();
      return;
    }
    // As the CLI does: a file that ends with a newline does not mean it.
    this.fileValue = text.replace(/\r?\n$/, "");
    this.value.value = "";
    this.showFile(f.name);
  }

  private forgetFile(): void {
    this.file.value = "";
    this.fileValue = undefined;
    this.showFile();
    setFieldError(this.value, this.valueError);
  }

  /** showFile says which file holds the value (its name and size, never its text); none: the value field is used. */
  private showFile(name?: string): void {
    const from = this.fileValue !== undefined;
    this.value.disabled = from;
    this.value.placeholder = from ? "from the file chosen" : "the value (write-only)";
    this.clearFile.hidden = !from;
    this.fileNote.textContent = from ? `the value is the text of ${name ?? "the file"} (${new TextEncoder().encode(this.fileValue).length} bytes)` : "";
    this.el.dataset.source = from ? "file" : "typed";
  }

  private async send(): Promise<void> {
    if (this.sending) return;
    setFieldError(this.name, this.nameError);
    setFieldError(this.value, this.valueError);
    this.formError.hidden = true;
    const name = this.name.value.trim();
    const value = this.fileValue ?? this.value.value;
    // What the gateway would refuse for sure is said here; it judges the rest.
    let ok = true;
    if (!NAME.test(name)) {
      setFieldError(this.name, this.nameError, name ? `Not a secret name: ${NAME_RULE}.` : "Give the secret a name.");
      ok = false;
    }
    if (value === "") {
      setFieldError(this.value, this.valueError, "Give a value: a secret's value is not empty.");
      ok = false;
    }
    if (!ok) {
      (this.nameError.hidden ? this.value : this.name).focus();
      return;
    }
    this.sending = true;
    this.submit.disabled = true;
    try {
      const body: SecretValue = { value };
      const s = await call<Secret>("PUT", `${this.base}/${enc(name)}`, body, this.signal);
      // Stored: the value leaves the page.
      this.value.value = "";
      this.forgetFile();
      this.name.value = "";
      setFieldError(this.name, this.nameError);
      this.secrets = [...this.secrets.filter((x) => x.name !== s.name), s];
      this.describe();
      // A creation (201) makes version 1, a replacement (200) a later one.
      this.saved(s, s.version === 1);
    } catch (e) {
      if (this.signal.aborted) return;
      this.showProblem(e, name);
    } finally {
      this.sending = false;
      this.submit.disabled = false;
    }
  }

  /** showProblem puts each error of the gateway's problem at its field, with its path; the rest under the form. */
  private showProblem(e: unknown, name: string): void {
    const errs = e instanceof ApiError ? (e.problem.errors ?? []) : [];
    const loose: FieldError[] = [];
    for (const fe of errs) {
      const said = fe.path ? `${fe.path}: ${fe.message}` : fe.message;
      // The name is a path segment: the gateway's schema check says path.secret, its own check secret.
      if (fe.path === "secret" || fe.path === "path.secret") setFieldError(this.name, this.nameError, said);
      else if (fe.path === "value") setFieldError(this.value, this.valueError, said);
      else loose.push(fe);
    }
    replace(
      this.formError,
      problemBox(e, `Saving ${name} refused: `),
      loose.length ? h("ul", {}, loose.map((fe) => h("li", {}, h("code", {}, fe.path || "(request)"), ": ", fe.message))) : null,
    );
    this.formError.hidden = false;
    if (!this.nameError.hidden) this.name.focus();
    else if (!this.valueError.hidden) (this.fileValue === undefined ? this.value : this.file).focus();
  }
}

function setFieldError(input: HTMLInputElement, el: HTMLElement, msg?: string): void {
  el.textContent = msg ?? "";
  el.hidden = !msg;
  if (msg) input.setAttribute("aria-invalid", "true");
  else input.removeAttribute("aria-invalid");
}
