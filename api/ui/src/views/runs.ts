// The runs list: newest first, filtered by pipeline, state and creator
// (the filters live in the URL), paged by the API's page tokens, and
// refreshed every few seconds while it shows the first page. Runs ticked
// (on any page, kept across refreshes) are compared side by side on the
// compare page (compare.ts).

import { enc, get, query } from "../api";
import { badge, fmtDuration, fmtTime, h, replace } from "../dom";
import { href } from "../route";
import { RUN_STATES, type Pipeline, type RunList } from "../types";
import { errorBox, type View } from "./view";

const REFRESH_MS = 5000;
const PAGE_SIZE = 50;
/** The bounds of a comparison (GET …/compare). */
export const COMPARE_MIN = 2;
export const COMPARE_MAX = 20;

export class RunsPage implements View {
  readonly el = h("section", { class: "page runs" });
  private readonly table = h("div", { class: "card table-card" });
  private readonly pager = h("div", { class: "pager" });
  private readonly abort = new AbortController();
  private timer?: number;
  /** page tokens of the pages before the current one ("" = first). */
  private tokens: string[] = [];
  private token = "";
  /** The runs ticked for a comparison, with when each was created (they are compared oldest first). */
  private readonly picked = new Map<string, string>();
  private readonly compareBtn = h("button", { id: "compare", class: "primary", type: "button", disabled: true, onclick: () => this.compare() }, "Compare");
  private readonly pickedNote = h("span", { class: "muted small", id: "compare-count" });
  private readonly clearPicked = h("button", { class: "link-button small", type: "button", hidden: true, onclick: () => this.unpickAll() }, "clear");

  constructor(
    private readonly project: string,
    private readonly filters: URLSearchParams,
  ) {
    const f = (k: string) => filters.get(k) ?? "";
    const pipeline = h("select", { name: "pipeline", id: "filter-pipeline", "aria-label": "pipeline" }, h("option", { value: "" }, "any pipeline"));
    if (f("pipeline")) pipeline.appendChild(h("option", { value: f("pipeline"), selected: true }, f("pipeline")));
    const state = h(
      "select",
      { name: "state", id: "filter-state", "aria-label": "state" },
      h("option", { value: "" }, "any state"),
      RUN_STATES.map((st) => h("option", { value: st, selected: st === f("state") }, st)),
    );
    const createdBy = h("input", { name: "createdBy", id: "filter-created-by", placeholder: "created by (token name)", value: f("createdBy"), "aria-label": "created by" });
    const apply = () => {
      location.hash = href.runs(project, { pipeline: pipeline.value, state: state.value, createdBy: createdBy.value.trim(), schedule: f("schedule") });
    };
    pipeline.addEventListener("change", apply);
    state.addEventListener("change", apply);
    const form = h(
      "form",
      {
        class: "filters",
        onsubmit: ((ev: Event) => {
          ev.preventDefault();
          apply();
        }) as EventListener,
      },
      pipeline,
      state,
      createdBy,
      // The runs a schedule started (the schedules page links here); no input: a schedule is picked there.
      f("schedule")
        ? h(
            "span",
            { class: "chip", id: "filter-schedule" },
            "schedule ",
            h("a", { href: href.schedules(project, f("schedule")) }, f("schedule")),
            h("a", { class: "chip-x", href: href.runs(project, { pipeline: f("pipeline"), state: f("state"), createdBy: f("createdBy") }), title: "any schedule", "aria-label": "any schedule" }, "×"),
          )
        : null,
      h("button", { type: "submit" }, "Filter"),
      filters.toString() ? h("a", { href: href.runs(project), class: "clear" }, "clear filters") : null,
    );
    this.updateCompare();
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Runs"), form, h("span", { class: "spacer" }), h("div", { class: "compare-bar" }, this.pickedNote, this.clearPicked, this.compareBtn)),
      this.table,
      this.pager,
    );

    get<{ pipelines: Pipeline[] }>(`/v1/projects/${enc(project)}/pipelines`, this.abort.signal)
      .then((res) => {
        for (const p of res.pipelines) if (p.name !== f("pipeline")) pipeline.appendChild(h("option", { value: p.name }, p.name));
      })
      .catch(() => {});
    void this.load();
  }

  dispose(): void {
    this.abort.abort();
    clearTimeout(this.timer);
  }

  private async load(): Promise<void> {
    clearTimeout(this.timer);
    const q = query({
      pipeline: this.filters.get("pipeline"),
      state: this.filters.get("state"),
      createdBy: this.filters.get("createdBy"),
      schedule: this.filters.get("schedule"),
      pageSize: PAGE_SIZE,
      pageToken: this.token,
    });
    try {
      const list = await get<RunList>(`/v1/projects/${enc(this.project)}/runs${q}`, this.abort.signal);
      this.render(list);
    } catch (e) {
      if (this.abort.signal.aborted) return;
      replace(this.table, errorBox(e));
    }
    if (!this.token && !this.abort.signal.aborted) this.timer = window.setTimeout(() => void this.load(), REFRESH_MS);
  }

  private render(list: RunList): void {
    if (!list.runs.length) {
      replace(this.table, h("p", { class: "empty" }, this.filters.toString() ? "No run matches these filters." : "No runs yet."));
    } else {
      replace(
        this.table,
        h(
          "table",
          { class: "list", id: "runs" },
          h("thead", {}, h("tr", {}, h("th", { class: "pick", title: `tick ${COMPARE_MIN} to ${COMPARE_MAX} runs to compare` }), ["Run", "Pipeline", "State", "Created", "Duration", "Created by"].map((c) => h("th", {}, c)))),
          h(
            "tbody",
            {},
            list.runs.map((r) =>
              h(
                "tr",
                { "data-run": r.id, class: this.picked.has(r.id) ? "selected" : "" },
                h("td", { class: "pick" }, this.checkbox(r.id, r.createdAt)),
                h("td", { class: "mono" }, h("a", { href: href.run(this.project, r.id) }, r.id)),
                h(
                  "td",
                  {},
                  r.pipeline
                    ? h("a", { href: href.pipeline(this.project, r.pipeline, r.version) }, `${r.pipeline}`, h("span", { class: "muted" }, ` v${r.version ?? ""}`))
                    : h("span", {}, r.workflow, h("span", { class: "muted" }, " (Go)")),
                ),
                h("td", {}, badge(r.state)),
                h("td", { class: "nowrap" }, fmtTime(r.createdAt)),
                h("td", { class: "nowrap" }, fmtDuration(r.createdAt, r.state === "RUNNING" || r.state === "PENDING" || r.state === "CANCELLING" ? undefined : r.updatedAt)),
                h("td", {}, r.createdBy ?? ""),
              ),
            ),
          ),
        ),
      );
    }
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

  private checkbox(id: string, createdAt: string): HTMLInputElement {
    const box: HTMLInputElement = h("input", {
      type: "checkbox",
      class: "pick-run",
      "data-run": id,
      checked: this.picked.has(id),
      "aria-label": `compare run ${id}`,
      onchange: () => {
        if (box.checked) this.picked.set(id, createdAt);
        else this.picked.delete(id);
        box.closest("tr")?.classList.toggle("selected", box.checked);
        this.updateCompare();
      },
    });
    return box;
  }

  private unpickAll(): void {
    this.picked.clear();
    for (const box of this.table.querySelectorAll<HTMLInputElement>("input.pick-run")) {
      box.checked = false;
      box.closest("tr")?.classList.remove("selected");
    }
    this.updateCompare();
  }

  private updateCompare(): void {
    const n = this.picked.size;
    this.compareBtn.disabled = n < COMPARE_MIN || n > COMPARE_MAX;
    this.compareBtn.title = n < COMPARE_MIN ? `tick ${COMPARE_MIN} to ${COMPARE_MAX} runs to compare them` : n > COMPARE_MAX ? `at most ${COMPARE_MAX} runs can be compared` : "";
    this.pickedNote.textContent = n ? `${n} selected${n > COMPARE_MAX ? ` (at most ${COMPARE_MAX})` : ""}` : "";
    this.clearPicked.hidden = !n;
  }

  private compare(): void {
    // Oldest first: the columns read left to right as the runs were made.
    const ids = [...this.picked].sort(([a, at], [b, bt]) => Date.parse(at) - Date.parse(bt) || (a < b ? -1 : a > b ? 1 : 0)).map(([id]) => id);
    if (ids.length >= COMPARE_MIN && ids.length <= COMPARE_MAX) location.hash = href.compare(this.project, ids);
  }

  private page(token: string): void {
    this.token = token;
    void this.load();
  }
}
