// The runs list: newest first, filtered by pipeline, state and creator
// (the filters live in the URL), paged by the API's page tokens, and
// refreshed every few seconds while it shows the first page. Runs ticked
// (on any page, kept across refreshes) are compared side by side on the
// compare page (compare.ts).
//
// With a pipeline filter, the list can instead be sorted by a scalar
// metric a step of that pipeline reported (`metric=<step>.<name>`,
// highest or lowest first, optionally bounded by metricMin/metricMax,
// all in the URL): GET …/runs?metric=… lists only the runs that reported
// it, each with its metricValue, shown in a Metric column. The gateway
// judges the combination; its 400 is shown at the fields it names.

import { ApiError, enc, get, query } from "../api";
import { fmtValue } from "../chart";
import { badge, fmtDuration, fmtTime, h, replace } from "../dom";
import { href } from "../route";
import { RUN_STATES, type Pipeline, type Run, type RunList } from "../types";
import { errorBox, type View } from "./view";

const REFRESH_MS = 5000;
const PAGE_SIZE = 50;
/** The bounds of a comparison (GET …/compare). */
export const COMPARE_MIN = 2;
export const COMPARE_MAX = 20;
/** The newest runs of the pipeline read for metric names to suggest (stopping at the first that has some). */
const SUGGEST_FROM = 5;

/** The URL's filters and the query params they are sent as (the same names). */
const FILTERS = ["pipeline", "state", "createdBy", "schedule", "metric", "metricOrder", "metricMin", "metricMax"] as const;
type FilterName = (typeof FILTERS)[number];

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
  /** Each filter's field (its input and where the gateway's message about it goes). */
  private readonly fields = new Map<FilterName, { input: HTMLElement; error: HTMLElement }>();
  /** Problems of the gateway's 400 that name no field. */
  private readonly problem = h("div", { id: "runs-problem" });

  constructor(
    private readonly project: string,
    private readonly filters: URLSearchParams,
  ) {
    const f = (k: FilterName) => filters.get(k) ?? "";
    const pipeline = h("select", { name: "pipeline", id: "filter-pipeline", "aria-label": "pipeline" }, h("option", { value: "" }, "any pipeline"));
    if (f("pipeline")) pipeline.appendChild(h("option", { value: f("pipeline"), selected: true }, f("pipeline")));
    const state = h(
      "select",
      { name: "state", id: "filter-state", "aria-label": "state" },
      h("option", { value: "" }, "any state"),
      RUN_STATES.map((st) => h("option", { value: st, selected: st === f("state") }, st)),
    );
    const createdBy = h("input", { name: "createdBy", id: "filter-created-by", placeholder: "created by (token name)", value: f("createdBy"), "aria-label": "created by" });

    // Sort by a metric: offered with a pipeline filter (the gateway lists one pipeline's runs by metric).
    const byMetric = !!f("pipeline");
    const metric = h("input", {
      name: "metric",
      id: "filter-metric",
      placeholder: "step.metric",
      value: f("metric"),
      list: "metric-names",
      autocomplete: "off",
      spellcheck: "false",
      "aria-label": "sort by metric (step.metric)",
    });
    const suggestions = h("datalist", { id: "metric-names" });
    const order = h(
      "select",
      { name: "metricOrder", id: "filter-metric-order", "aria-label": "metric order" },
      h("option", { value: "desc", selected: f("metricOrder") !== "asc" }, "highest first"),
      h("option", { value: "asc", selected: f("metricOrder") === "asc" }, "lowest first"),
    );
    // Text, not number inputs: what is typed is sent, and the gateway says what is wrong with it.
    const min = h("input", { name: "metricMin", id: "filter-metric-min", class: "bound", placeholder: "min", value: f("metricMin"), inputmode: "decimal", "aria-label": "metric at least" });
    const max = h("input", { name: "metricMax", id: "filter-metric-max", class: "bound", placeholder: "max", value: f("metricMax"), inputmode: "decimal", "aria-label": "metric at most" });

    const apply = () => {
      const next: Record<string, string> = { pipeline: pipeline.value, state: state.value, createdBy: createdBy.value.trim(), schedule: f("schedule") };
      // The metric sort belongs to the pipeline it was set for; without a metric, order and bounds mean nothing.
      const m = metric.value.trim();
      if (next.pipeline && m) Object.assign(next, { metric: m, metricOrder: order.value, metricMin: min.value.trim(), metricMax: max.value.trim() });
      location.hash = href.runs(project, next);
    };
    pipeline.addEventListener("change", apply);
    state.addEventListener("change", apply);
    order.addEventListener("change", () => {
      if (metric.value.trim()) apply();
    });
    const submit = ((ev: Event) => {
      ev.preventDefault();
      apply();
    }) as EventListener;
    const form = h(
      "form",
      { class: "filters", onsubmit: submit },
      this.field("pipeline", pipeline),
      this.field("state", state),
      this.field("createdBy", createdBy),
      // The runs a schedule started (the schedules page links here); no input: a schedule is picked there.
      f("schedule")
        ? this.field(
            "schedule",
            h(
              "span",
              { class: "chip", id: "filter-schedule" },
              "schedule ",
              h("a", { href: href.schedules(project, f("schedule")) }, f("schedule")),
              h("a", { class: "chip-x", href: href.runs(project, this.without("schedule")), title: "any schedule", "aria-label": "any schedule" }, "×"),
            ),
          )
        : null,
      h("button", { type: "submit" }, "Filter"),
      filters.toString() ? h("a", { href: href.runs(project), class: "clear" }, "clear filters") : null,
    );
    const sortForm = byMetric
      ? h(
          "form",
          { class: "filters metric-sort", id: "metric-sort", onsubmit: submit },
          h("span", { class: "muted" }, "Sort by metric"),
          this.field("metric", metric),
          suggestions,
          this.field("metricOrder", order),
          this.field("metricMin", min),
          h("span", { class: "muted" }, "to"),
          this.field("metricMax", max),
          h("button", { type: "submit", id: "metric-apply" }, "Sort"),
          f("metric") ? h("a", { href: href.runs(project, this.without("metric", "metricOrder", "metricMin", "metricMax")), id: "metric-clear", class: "clear" }, "newest first") : null,
        )
      : null;
    this.updateCompare();
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Runs"), form, h("span", { class: "spacer" }), h("div", { class: "compare-bar" }, this.pickedNote, this.clearPicked, this.compareBtn)),
      sortForm,
      this.problem,
      this.table,
      this.pager,
    );

    get<{ pipelines: Pipeline[] }>(`/v1/projects/${enc(project)}/pipelines`, this.abort.signal)
      .then((res) => {
        for (const p of res.pipelines) if (p.name !== f("pipeline")) pipeline.appendChild(h("option", { value: p.name }, p.name));
      })
      .catch(() => {});
    if (byMetric) void this.suggest(f("pipeline"), suggestions, metric);
    void this.load();
  }

  /** field wraps a filter's input with the place for the gateway's message about it. */
  private field(name: FilterName, input: HTMLElement): HTMLElement {
    const error = h("span", { class: "field-error", "data-field": name, role: "alert", hidden: true });
    this.fields.set(name, { input, error });
    return h("span", { class: "field" }, input, error);
  }

  /** without is the URL's filters but names. */
  private without(...names: FilterName[]): Record<string, string> {
    const out: Record<string, string> = {};
    for (const k of FILTERS) if (!names.includes(k)) out[k] = this.filters.get(k) ?? "";
    return out;
  }

  /**
   * suggest offers the scalar metrics the pipeline's newest runs reported
   * (`step.name`), read from the first of them that has any.
   */
  private async suggest(pipeline: string, list: HTMLDataListElement, input: HTMLInputElement): Promise<void> {
    const signal = this.abort.signal;
    try {
      const recent = await get<RunList>(`/v1/projects/${enc(this.project)}/runs${query({ pipeline, pageSize: SUGGEST_FROM })}`, signal);
      for (const r of recent.runs) {
        const run = await get<Run>(`/v1/projects/${enc(this.project)}/runs/${enc(r.id)}`, signal);
        const names = (run.status?.steps ?? []).flatMap((st) => Object.keys(st.metrics?.scalars ?? {}).map((m) => `${st.name}.${m}`));
        if (!names.length) continue;
        replace(
          list,
          names.map((n) => h("option", { value: n })),
        );
        if (!input.value) input.placeholder = `step.metric, e.g. ${names[0]}`;
        return;
      }
    } catch {
      /* no suggestions: the field still takes any name */
    }
  }

  dispose(): void {
    this.abort.abort();
    clearTimeout(this.timer);
  }

  private async load(): Promise<void> {
    clearTimeout(this.timer);
    const q = query({ ...Object.fromEntries(FILTERS.map((k) => [k, this.filters.get(k)])), pageSize: PAGE_SIZE, pageToken: this.token });
    try {
      const list = await get<RunList>(`/v1/projects/${enc(this.project)}/runs${q}`, this.abort.signal);
      this.showProblem(undefined);
      this.render(list);
    } catch (e) {
      if (this.abort.signal.aborted) return;
      replace(this.table, errorBox(e));
      // A 400 names the filters it refuses: shown at them, and not asked again.
      if (e instanceof ApiError && e.status === 400) {
        this.showProblem(e);
        replace(this.pager);
        return;
      }
    }
    if (!this.token && !this.abort.signal.aborted) this.timer = window.setTimeout(() => void this.load(), REFRESH_MS);
  }

  /** showProblem puts each of a 400's messages at the field it names (`query.metricMin`); the rest above the list. */
  private showProblem(e: ApiError | undefined): void {
    for (const { input, error } of this.fields.values()) {
      error.hidden = true;
      error.textContent = "";
      input.removeAttribute("aria-invalid");
    }
    const other: string[] = [];
    for (const fe of e?.problem.errors ?? []) {
      const f = this.fields.get(fe.path.replace(/^query\./, "") as FilterName);
      if (!f || !fe.path.startsWith("query.")) {
        other.push(fe.path ? `${fe.path}: ${fe.message}` : fe.message);
        continue;
      }
      f.error.textContent = f.error.textContent ? `${f.error.textContent}; ${fe.message}` : fe.message;
      f.error.hidden = false;
      f.input.setAttribute("aria-invalid", "true");
    }
    replace(this.problem, other.length ? h("ul", { class: "alert error problems" }, other.map((m) => h("li", {}, m))) : null);
  }

  private render(list: RunList): void {
    const metric = this.filters.get("metric") ?? "";
    const asc = this.filters.get("metricOrder") === "asc";
    if (!list.runs.length) {
      const bounds = [this.filters.get("metricMin") && `at least ${this.filters.get("metricMin")}`, this.filters.get("metricMax") && `at most ${this.filters.get("metricMax")}`].filter(Boolean).join(" and ");
      replace(
        this.table,
        h(
          "p",
          { class: "empty" },
          metric
            ? `No run of ${this.filters.get("pipeline")}${this.filters.get("state") ? ` in state ${this.filters.get("state")}` : ""} reported ${metric}${bounds ? ` ${bounds}` : ""}.`
            : this.filters.toString()
              ? "No run matches these filters."
              : "No runs yet.",
        ),
      );
    } else {
      replace(
        this.table,
        h(
          "table",
          { class: "list", id: "runs" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              h("th", { class: "pick", title: `tick ${COMPARE_MIN} to ${COMPARE_MAX} runs to compare` }),
              ["Run", "Pipeline", "State"].map((c) => h("th", {}, c)),
              metric ? h("th", { class: "metric", id: "metric-head", title: `${metric}, ${asc ? "lowest" : "highest"} first` }, metric, ` ${asc ? "↑" : "↓"}`) : null,
              ["Created", "Duration", "Created by"].map((c) => h("th", {}, c)),
            ),
          ),
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
                metric ? h("td", { class: "metric num", "data-value": r.metricValue !== undefined ? String(r.metricValue) : "" }, r.metricValue !== undefined ? fmtValue(r.metricValue) : "") : null,
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
