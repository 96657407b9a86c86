// The artifacts of a step (or of one forEach item) in the run page's
// drawer: what it wrote and what it read, each with its lineage (who made
// it, which steps read it), a download, a directory's files, and a preview
// of small ones (text, CSV, JSON, a metrics table, images).
//
// The bytes are read with the token (the content route needs it, so a
// plain link could not authenticate) and offered as a Blob. They are read
// with redirect=false: a store that signs URLs (S3, GCS, Azure) would
// otherwise answer with a redirect to its own origin, which the page's
// Content-Security-Policy (connect-src 'self') does not let it follow; the
// gateway streams them instead. Every name, path and byte an artifact
// carries is rendered as text, and images only as <img> from a Blob URL
// (an SVG there runs no script and loads nothing).

import { ApiError, enc, fetchBlob, get } from "../api";
import { fmtBytes, h, json, replace } from "../dom";
import { href } from "../route";
import type { Artifact, ArtifactFile, ArtifactFileList, ArtifactLineage, ArtifactUse, RunStatus } from "../types";
import { message } from "./view";

/** The largest artifact (or directory file) the drawer previews. */
export const PREVIEW_MAX = 64 * 1024;
/** The most files of a directory listed. */
const FILES_SHOWN = 200;
/** The most rows a metrics table shows. */
const METRICS_ROWS = 200;

interface Ctx {
  project: string;
  run: string;
  signal: AbortSignal;
  /** keep registers a Blob URL, revoked when the section goes. */
  keep(url: string): void;
}

/**
 * ArtifactsSection is the drawer's "Artifacts" section for one step or
 * item. It is built once per list of artifacts (the run page keeps it
 * across re-renders) and fetches lineage, listings and previews itself;
 * dispose stops them and frees the Blob URLs.
 */
export class ArtifactsSection {
  readonly el: HTMLElement;
  private readonly abort = new AbortController();
  private readonly urls: string[] = [];
  private readonly cards: ArtifactCard[] = [];

  constructor(project: string, run: string, outputs: Artifact[], inputs: Artifact[]) {
    const ctx: Ctx = { project, run, signal: this.abort.signal, keep: (u) => this.urls.push(u) };
    const group = (role: "output" | "input", title: string, as: Artifact[]) => {
      if (!as.length) return null;
      const cards = as.map((a) => new ArtifactCard(ctx, a, role));
      this.cards.push(...cards);
      return h("div", { class: "artifact-group", "data-role": role }, h("h4", {}, `${title} (${as.length})`), cards.map((c) => c.el));
    };
    this.el = h("div", { class: "artifacts", id: "artifacts" }, h("h3", {}, "Artifacts"), group("output", "Written", outputs), group("input", "Read", inputs));
  }

  /** observe takes the run's latest status: steps of this run that read an artifact are its consumers at once. */
  observe(st: RunStatus | undefined): void {
    if (st) for (const c of this.cards) c.observe(st);
  }

  dispose(): void {
    this.abort.abort();
    for (const u of this.urls) URL.revokeObjectURL(u);
    this.urls.length = 0;
  }
}

class ArtifactCard {
  readonly el: HTMLElement;
  private readonly consumersEl = h("div", { class: "consumers small" });
  private readonly body = h("div", { class: "artifact-body" });
  private readonly preview = h("div", { class: "preview", hidden: true });
  private readonly errors = h("div", { class: "artifact-errors" });
  private readonly base: string;
  private lineage?: ArtifactUse[];
  private local: ArtifactUse[] = [];
  private localKey = "";
  /** Bytes already read, by directory path ("" for a file artifact). */
  private readonly blobs = new Map<string, Blob>();

  constructor(
    private readonly ctx: Ctx,
    private readonly a: Artifact,
    role: "output" | "input",
  ) {
    this.base = `/v1/projects/${enc(ctx.project)}/artifacts/${enc(a.id)}`;
    const dir = a.files !== undefined && a.files !== null;
    const short = shortDigest(a.digest);
    this.el = h(
      "div",
      { class: "artifact", "data-role": role, "data-name": a.name, "data-id": a.id },
      h(
        "div",
        { class: "artifact-head" },
        h("span", { class: "artifact-name" }, a.name),
        h("span", { class: "artifact-type", "data-type": a.type }, a.type),
        h("span", { class: "size", title: `${a.size} bytes` }, fmtBytes(a.size)),
        dir ? h("span", { class: "file-count muted" }, `${a.files} ${a.files === 1 ? "file" : "files"}`) : null,
        h("span", { class: "spacer" }),
        dir ? null : this.downloadButton("", a.name, a.size),
      ),
      h(
        "div",
        { class: "artifact-facts small" },
        h("code", { class: "digest", title: a.digest }, short),
        role === "input" ? this.from() : this.producer(),
      ),
      this.consumersEl,
      this.errors,
      this.body,
      this.preview,
    );
    replace(this.consumersEl, h("span", { class: "muted" }, "Read by: …"));
    void this.load(dir);
  }

  /** from says where an input came from: its producer's step and run. */
  private from(): HTMLElement {
    const p = this.a.producer;
    const name = this.a.from || `${p.step}${p.item !== undefined ? `[${p.item}]` : ""}`;
    const other = p.run !== this.ctx.run;
    return h(
      "span",
      { class: "from" },
      "from ",
      h("a", { href: href.run(this.ctx.project, p.run, p.step, p.item) }, name),
      " of run ",
      other ? h("a", { href: href.run(this.ctx.project, p.run), class: "mono run-link" }, p.run) : h("span", { class: "mono", title: "this run" }, p.run),
    );
  }

  /** producer says which attempt wrote an output, and which run when it was another (a cached step's). */
  private producer(): HTMLElement {
    const p = this.a.producer;
    const where = `${p.step}${p.item !== undefined ? `[${p.item}]` : ""}`;
    if (p.run === this.ctx.run) return h("span", { class: "producer muted" }, `written by attempt ${p.attempt}`);
    return h(
      "span",
      { class: "producer" },
      "written by ",
      h("a", { href: href.run(this.ctx.project, p.run, p.step, p.item) }, where),
      ` (attempt ${p.attempt}) of run `,
      h("a", { href: href.run(this.ctx.project, p.run), class: "mono run-link" }, p.run),
    );
  }

  observe(st: RunStatus): void {
    const local: ArtifactUse[] = [];
    const reads = (step: string, item: number | undefined, inputs: Artifact[] | undefined) => {
      for (const i of inputs ?? []) if (i.id === this.a.id) local.push({ run: st.runId, step, item, input: i.name, at: "" });
    };
    for (const s of st.steps) {
      reads(s.name, undefined, s.inputs);
      s.items?.forEach((it, i) => reads(s.name, i, it.inputs));
    }
    const key = JSON.stringify(local);
    if (key === this.localKey) return;
    this.localKey = key;
    this.local = local;
    if (this.lineage) this.renderConsumers();
  }

  private async load(dir: boolean): Promise<void> {
    // The lineage (recorded by the run mirror, so it may lag a step that
    // just ended by a moment) gives the consumers; until it is there the
    // files and content routes do not know the artifact either.
    try {
      const l = await lagging(() => get<ArtifactLineage>(this.base, this.ctx.signal), this.ctx.signal);
      this.lineage = l.consumers;
      this.renderConsumers();
    } catch (e) {
      if (this.ctx.signal.aborted) return;
      replace(this.consumersEl);
      this.fail(e, "Lineage");
      return;
    }
    if (dir) {
      try {
        const list = await get<ArtifactFileList>(`${this.base}/files`, this.ctx.signal);
        this.renderFiles(list.files);
      } catch (e) {
        if (!this.ctx.signal.aborted) this.fail(e, "Files");
      }
    } else if (this.a.size <= PREVIEW_MAX) {
      await this.showPreview("", this.a.name, true);
    }
  }

  private renderConsumers(): void {
    const seen = new Set<string>();
    const all: ArtifactUse[] = [];
    for (const u of [...(this.lineage ?? []), ...this.local]) {
      const k = JSON.stringify([u.run, u.step, u.item ?? null, u.input]);
      if (!seen.has(k)) {
        seen.add(k);
        all.push(u);
      }
    }
    if (!all.length) {
      replace(this.consumersEl, h("span", { class: "muted" }, "Read by no step yet."));
      return;
    }
    replace(
      this.consumersEl,
      h("span", { class: "muted" }, "Read by: "),
      all.map((u, i) => {
        const step = `${u.step}${u.item !== undefined && u.item !== null ? `[${u.item}]` : ""}`;
        return h(
          "span",
          { class: "consumer", "data-run": u.run, "data-step": u.step },
          i ? ", " : null,
          h("a", { href: href.run(this.ctx.project, u.run, u.step, u.item ?? undefined) }, step),
          u.input !== this.a.name ? h("span", { class: "muted" }, ` as ${u.input}`) : null,
          u.run !== this.ctx.run ? [h("span", { class: "muted" }, " of run "), h("a", { href: href.run(this.ctx.project, u.run), class: "mono run-link" }, u.run)] : null,
        );
      }),
    );
  }

  private renderFiles(files: ArtifactFile[]): void {
    const shown = files.slice(0, FILES_SHOWN);
    replace(
      this.body,
      h(
        "table",
        { class: "list compact files" },
        h("thead", {}, h("tr", {}, h("th", {}, "File"), h("th", {}, "Size"), h("th", {}))),
        h(
          "tbody",
          {},
          shown.map((f) => {
            const base = f.path.split("/").pop() || this.a.name;
            return h(
              "tr",
              { "data-path": f.path },
              h("td", { class: "mono path", title: f.digest }, f.path),
              h("td", { class: "nowrap size", title: `${f.size} bytes` }, fmtBytes(f.size)),
              h(
                "td",
                { class: "nowrap file-actions" },
                f.size <= PREVIEW_MAX ? h("button", { class: "small preview-file", type: "button", onclick: () => void this.showPreview(f.path, base, false) }, "Preview") : null,
                this.downloadButton(f.path, base, f.size),
              ),
            );
          }),
        ),
      ),
      files.length > shown.length ? h("p", { class: "muted small" }, `… and ${files.length - shown.length} more files: \`atelier artifacts get ${this.a.id}\` downloads them all.`) : null,
    );
  }

  private downloadButton(path: string, filename: string, size: number): HTMLButtonElement {
    const btn: HTMLButtonElement = h(
      "button",
      {
        class: "small download",
        type: "button",
        "data-path": path,
        title: `Download ${filename} (${fmtBytes(size)})`,
        onclick: () => {
          btn.disabled = true;
          btn.textContent = "Downloading…";
          this.bytes(path)
            .then((b) => save(b, filename))
            .catch((e) => {
              if (!this.ctx.signal.aborted) this.fail(e, `Download of ${path || this.a.name}`);
            })
            .finally(() => {
              btn.disabled = false;
              btn.textContent = "Download";
            });
        },
      },
      "Download",
    );
    return btn;
  }

  /** bytes reads a file artifact (path "") or one file of a directory, once. */
  private async bytes(path: string): Promise<Blob> {
    const have = this.blobs.get(path);
    if (have) return have;
    const q = path ? `?redirect=false&path=${enc(path)}` : "?redirect=false";
    const b = await fetchBlob(`${this.base}/content${q}`, this.ctx.signal);
    if (b.size <= PREVIEW_MAX) this.blobs.set(path, b); // large ones are not kept in memory
    return b;
  }

  private async showPreview(path: string, name: string, auto: boolean): Promise<void> {
    const caption = path ? h("div", { class: "preview-caption small" }, h("span", { class: "mono" }, path), h("span", { class: "spacer" }), h("button", { class: "link-button small", type: "button", onclick: () => (this.preview.hidden = true) }, "close")) : null;
    this.preview.hidden = false;
    this.preview.dataset.path = path;
    replace(this.preview, caption, h("p", { class: "muted small" }, "Loading preview…"));
    try {
      const b = await this.bytes(path);
      if (this.preview.dataset.path !== path) return; // another file was picked meanwhile
      replace(this.preview, caption, await render(b, name, this.a.type, this.ctx));
    } catch (e) {
      if (this.ctx.signal.aborted) return;
      if (auto) {
        this.preview.hidden = true;
        this.fail(e, "Preview");
      } else {
        replace(this.preview, caption, h("div", { class: "alert error" }, `Preview: ${message(e)}`));
      }
    }
  }

  private fail(e: unknown, what: string): void {
    let msg = message(e);
    if (e instanceof ApiError && e.status === 404) msg = `${msg}: the artifact is not in the catalogue (yet, or any more)`;
    this.errors.appendChild(h("div", { class: "alert error", "data-error": e instanceof ApiError ? e.status : "" }, `${what}: ${msg}`));
  }
}

/** lagging retries a read that answers 404 for a few seconds: lineage is written by the run mirror, a moment after the status. */
async function lagging<T>(f: () => Promise<T>, signal: AbortSignal): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await f();
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 404) || i >= 8 || signal.aborted) throw e;
      await new Promise((r) => setTimeout(r, 500 + 250 * i));
    }
  }
}

/** shortDigest is sha256:<first 12 hex digits>; the full one is in the title. */
export function shortDigest(d: string): string {
  const i = d.indexOf(":");
  return i >= 0 ? `${d.slice(0, i + 1)}${d.slice(i + 1, i + 13)}` : d.slice(0, 12);
}

/** save offers a Blob as a download. */
function save(b: Blob, filename: string): void {
  const url = URL.createObjectURL(b);
  const a = h("a", { download: filename, hidden: true });
  a.href = url; // a Blob URL of our own: not through h(), whose href filter lets only http(s) through
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** imageType sniffs PNG, JPEG, GIF and SVG by their content. */
function imageType(b: Uint8Array, text: string | null): string | null {
  const starts = (...sig: number[]) => sig.every((v, i) => b[i] === v);
  if (starts(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)) return "image/png";
  if (starts(0xff, 0xd8, 0xff)) return "image/jpeg";
  if (starts(0x47, 0x49, 0x46, 0x38)) return "image/gif";
  if (text !== null && looksLikeSvg(text)) return "image/svg+xml";
  return null;
}

/** looksLikeSvg: an <svg> root after any XML declaration, comments and doctype (scanned, not a backtracking regex). */
function looksLikeSvg(text: string): boolean {
  let t = text.slice(0, 8192);
  for (;;) {
    t = t.trimStart();
    const end = t.startsWith("<?") ? "?>" : t.startsWith("<!--") ? "-->" : /^<!doctype/i.test(t) ? ">" : "";
    if (!end) return /^<svg[\s>]/i.test(t);
    const i = t.indexOf(end, 2);
    if (i < 0) return false;
    t = t.slice(i + end.length);
  }
}

/** utf8 decodes text, or null for bytes that are not text. */
function utf8(b: Uint8Array): string | null {
  if (b.includes(0)) return null;
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(b);
  } catch {
    return null;
  }
}

/** render previews bytes: an image, a metrics table, pretty JSON, or text. */
async function render(blob: Blob, name: string, type: string, ctx: Ctx): Promise<Node> {
  const b = new Uint8Array(await blob.arrayBuffer());
  if (!b.length) return h("p", { class: "muted small" }, "(empty)");
  const text = utf8(b);
  const img = imageType(b, text);
  if (img) {
    // The gateway sends application/octet-stream: the Blob gets the sniffed type.
    const url = URL.createObjectURL(new Blob([blob], { type: img }));
    ctx.keep(url);
    const el = h("img", { class: "preview-img", alt: name });
    el.src = url;
    return el;
  }
  if (text === null) return h("p", { class: "muted small" }, `Binary content (${fmtBytes(b.length)}): no preview; download it.`);
  const t = text.trim();
  if (/\.json$/i.test(name) || type === "metrics" || t.startsWith("{") || t.startsWith("[")) {
    let v: unknown;
    let ok = false;
    try {
      v = JSON.parse(t);
      ok = true;
    } catch {
      /* not JSON: shown as text */
    }
    if (ok) {
      if (type === "metrics" && v !== null && typeof v === "object" && !Array.isArray(v)) return metricsTable(v as Record<string, unknown>);
      return h("pre", { class: "json preview-text", "data-format": "json" }, json(v));
    }
  }
  return h("pre", { class: "json preview-text", "data-format": /\.csv$/i.test(name) ? "csv" : "text" }, text);
}

/** metricsTable shows a metrics object as key/value rows (nested keys dotted). */
function metricsTable(v: Record<string, unknown>): HTMLElement {
  const rows: [string, string][] = [];
  const walk = (prefix: string, o: Record<string, unknown>) => {
    for (const [k, x] of Object.entries(o)) {
      const key = prefix ? `${prefix}.${k}` : k;
      if (x !== null && typeof x === "object" && !Array.isArray(x)) walk(key, x as Record<string, unknown>);
      else rows.push([key, typeof x === "string" ? x : JSON.stringify(x)]);
    }
  };
  walk("", v);
  const shown = rows.slice(0, METRICS_ROWS);
  return h(
    "div",
    {},
    h(
      "table",
      { class: "list compact metrics" },
      h("thead", {}, h("tr", {}, h("th", {}, "Metric"), h("th", {}, "Value"))),
      h(
        "tbody",
        {},
        shown.map(([k, x]) => h("tr", { "data-metric": k }, h("td", { class: "mono" }, k), h("td", { class: "mono value" }, x))),
      ),
    ),
    rows.length > shown.length ? h("p", { class: "muted small" }, `… and ${rows.length - shown.length} more.`) : null,
    !rows.length ? h("p", { class: "muted small" }, "(no metrics)") : null,
  );
}
