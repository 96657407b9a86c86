// The step cache (#/p/<project>/cache): the project's live entries, newest
// first, filtered by pipeline and step (in the URL) and paged; each with
// its key, the step (and forEach item) and run that stored it, linked,
// when, until when, its outputs and artifacts. An entry can be evicted,
// or every entry of the filter, after a confirmation: the next run of
// such a step runs it again. Listing needs a viewer, evicting an editor
// (a viewer is not offered Evict; a refused eviction shows the gateway's
// problem). The first page refreshes every few seconds, except while a
// confirmation is open.

import { call, enc, get, query } from "../api";
import { fmtBytes, fmtTime, h, replace } from "../dom";
import { href } from "../route";
import { canEdit, roleNote } from "../session";
import type { CacheEntry, CacheEntryList } from "../types";
import { errorBox, message, type View } from "./view";

const REFRESH_MS = 5000;
const PAGE_SIZE = 50;

/** outputsSummary renders outputs as `k=v` pairs, short; the title has the JSON. */
function outputsSummary(outputs: Record<string, unknown>): HTMLElement {
  const entries = Object.entries(outputs ?? {});
  if (!entries.length) return h("span", { class: "muted" }, "none");
  const full = JSON.stringify(outputs);
  const text = entries.map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(", ");
  return h("span", { class: "mono outputs", title: full.length > 2000 ? `${full.slice(0, 2000)}…` : full }, text.length > 120 ? `${text.slice(0, 120)}…` : text);
}

function artifactsSummary(e: CacheEntry): HTMLElement {
  const a = e.artifacts ?? [];
  if (!a.length) return h("span", { class: "muted" }, "none");
  const size = a.reduce((n, x) => n + (x.size || 0), 0);
  return h("span", { title: a.map((x) => `${x.name} (${x.type}, ${fmtBytes(x.size)})`).join("\n") }, `${a.length} · ${fmtBytes(size)}`);
}

export class CachePage implements View {
  readonly el = h("section", { class: "page cache" });
  private readonly table = h("div", { class: "card table-card", id: "cache-host" });
  private readonly pager = h("div", { class: "pager" });
  private readonly flash = h("div", { id: "cache-flash" });
  private readonly confirm = h("form", { class: "confirm", id: "confirm-evict", hidden: true });
  private readonly abort = new AbortController();
  private timer?: number;
  private tokens: string[] = [];
  private token = "";
  private list?: CacheEntryList;

  constructor(
    private readonly project: string,
    private readonly filters: URLSearchParams,
  ) {
    const f = (k: string) => filters.get(k) ?? "";
    const pipeline = h("input", { name: "pipeline", id: "cache-pipeline", placeholder: "pipeline", value: f("pipeline"), "aria-label": "pipeline" });
    const step = h("input", { name: "step", id: "cache-step", placeholder: "step", value: f("step"), "aria-label": "step" });
    const form = h(
      "form",
      {
        class: "filters",
        onsubmit: ((ev: Event) => {
          ev.preventDefault();
          location.hash = href.cache(project, { pipeline: pipeline.value.trim(), step: step.value.trim() });
        }) as EventListener,
      },
      pipeline,
      step,
      h("button", { type: "submit" }, "Filter"),
      filters.toString() ? h("a", { href: href.cache(project), class: "clear" }, "clear filters") : null,
    );
    const evictAll = canEdit() ? h("button", { class: "danger", id: "evict-all", type: "button", onclick: () => this.askEvictAll() }, f("pipeline") || f("step") ? "Evict these…" : "Evict all…") : null;
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Step cache"), form, h("span", { class: "spacer" }), evictAll),
      canEdit() ? null : roleNote("editor", "Evicting cache entries", "cache-role-note"),
      h(
        "p",
        { class: "note" },
        "Each entry is the outputs of a successful step (or forEach item) under the key of its rendered work; a later run of the same work in this project reuses it (the step shows CACHED). Evicting an entry makes the next such step run again.",
      ),
      this.confirm,
      this.flash,
      this.table,
      this.pager,
    );
    replace(this.table, h("p", { class: "empty" }, "Loading…"));
    void this.load();
  }

  dispose(): void {
    this.abort.abort();
    clearTimeout(this.timer);
  }

  private get base(): string {
    return `/v1/projects/${enc(this.project)}/cache`;
  }

  private async load(): Promise<void> {
    clearTimeout(this.timer);
    const q = query({ pipeline: this.filters.get("pipeline"), step: this.filters.get("step"), pageSize: PAGE_SIZE, pageToken: this.token });
    try {
      this.list = await get<CacheEntryList>(`${this.base}${q}`, this.abort.signal);
      this.render(this.list);
    } catch (e) {
      if (this.abort.signal.aborted) return;
      replace(this.table, errorBox(e));
    }
    this.schedule();
  }

  private schedule(): void {
    clearTimeout(this.timer);
    if (!this.token && !this.abort.signal.aborted) this.timer = window.setTimeout(() => (this.confirm.hidden ? void this.load() : this.schedule()), REFRESH_MS);
  }

  private render(list: CacheEntryList): void {
    const p = this.project;
    // A viewer is not offered Evict (the gateway would refuse it).
    const edit = canEdit();
    replace(
      this.table,
      list.entries.length
        ? h(
            "table",
            { class: "list", id: "cache" },
            h("thead", {}, h("tr", {}, ["Key", "Pipeline", "Step", "Stored by run", "Created", "Expires", "Outputs", "Artifacts", ...(edit ? [""] : [])].map((c) => h("th", {}, c)))),
            h(
              "tbody",
              {},
              list.entries.map((e) =>
                h(
                  "tr",
                  { "data-key": e.key, "data-step": e.step, "data-run": e.runId },
                  h("td", { class: "mono nowrap", title: e.key }, `${e.key.slice(0, 12)}…`),
                  h("td", {}, h("a", { href: href.cache(p, { pipeline: e.pipeline }) }, e.pipeline)),
                  h("td", {}, h("a", { href: href.cache(p, { pipeline: e.pipeline, step: e.step }) }, e.step), e.item !== undefined ? h("span", { class: "muted" }, ` [item ${e.item}]`) : null),
                  h("td", {}, h("a", { class: "mono run-link", href: href.run(p, e.runId, e.step, e.item) }, e.runId), h("div", { class: "muted small" }, `attempt ${e.attempt}`)),
                  h("td", { class: "nowrap" }, fmtTime(e.createdAt)),
                  h("td", { class: "nowrap" }, e.expiresAt ? fmtTime(e.expiresAt) : h("span", { class: "muted" }, "never")),
                  h("td", { class: "ellipsis-wide" }, outputsSummary(e.outputs)),
                  h("td", { class: "nowrap" }, artifactsSummary(e)),
                  edit ? h("td", { class: "nowrap" }, h("button", { class: "danger small evict", type: "button", "data-key": e.key, onclick: () => this.askEvict(e) }, "Evict")) : null,
                ),
              ),
            ),
          )
        : h("p", { class: "empty", id: "no-entries" }, this.filters.toString() ? "No live entry matches these filters." : "No live cache entry. Steps with a cache block store their outputs when they succeed."),
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
    replace(this.pager, newer, older, this.token ? null : h("span", { class: "muted" }, `refreshes every ${REFRESH_MS / 1000}s`));
  }

  private page(token: string): void {
    this.token = token;
    void this.load();
  }

  /** ask opens the confirmation: what is evicted, and the button that does it. */
  private ask(text: HTMLElement | string, label: string, act: () => Promise<string>): void {
    replace(this.flash);
    const yes = h("button", { type: "submit", class: "danger", id: "confirm-evict-yes" }, label);
    replace(
      this.confirm,
      h("span", { class: "confirm-text" }, text),
      yes,
      h(
        "button",
        {
          type: "button",
          id: "confirm-evict-no",
          onclick: () => {
            this.confirm.hidden = true;
          },
        },
        "Keep",
      ),
    );
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
          yes.disabled = false;
          replace(this.flash, h("div", { class: "alert error", role: "alert" }, `Evict failed: ${message(e)}`));
        });
    };
    this.confirm.hidden = false;
    yes.focus();
  }

  private askEvict(e: CacheEntry): void {
    this.ask(
      h("span", {}, "Evict the entry ", h("code", {}, e.key.slice(0, 12)), ` of step ${e.step}${e.item !== undefined ? ` [item ${e.item}]` : ""} (stored by run ${e.runId})? The next run of this work runs the step again.`),
      "Evict entry",
      async () => {
        await call<void>("DELETE", `${this.base}/${enc(e.key)}`, undefined, this.abort.signal);
        return `Evicted the entry ${e.key.slice(0, 12)}… of step ${e.step}.`;
      },
    );
  }

  private askEvictAll(): void {
    const pipeline = this.filters.get("pipeline") ?? "";
    const step = this.filters.get("step") ?? "";
    const scope = [pipeline && `pipeline ${pipeline}`, step && `step ${step}`].filter(Boolean).join(" and ");
    this.ask(
      `Evict every live cache entry ${scope ? `of ${scope}` : `of project ${this.project}`} (every page, not only the one shown)? Their steps run again in the next runs.`,
      "Evict all",
      async () => {
        const r = await call<{ evicted: number }>("DELETE", `${this.base}${query({ pipeline, step })}`, undefined, this.abort.signal);
        return `Evicted ${r.evicted} entr${r.evicted === 1 ? "y" : "ies"}.`;
      },
    );
  }
}
