// Runs side by side (GET …/compare, 2 to 20 runs in the order of the URL):
// a column per run, a row per parameter, step output and step metric,
// grouped; rows whose values differ are marked, and for a metric the run
// with the highest value (best) and the lowest (worst). "Only differences"
// (on by default) hides the rows where every run agrees. Each series
// metric (a curve) is a chart with a line per run. While a compared run is
// not over, the page refreshes.

import { enc, get } from "../api";
import { colour, fmtValue, lineChart } from "../chart";
import { badge, fmtTime, h, replace } from "../dom";
import { href } from "../route";
import { runTerminal, type ComparedMetric, type ComparedRun, type ComparedSeries, type ComparedValue, type RunComparison } from "../types";
import { errorBox, type View } from "./view";

const REFRESH_MS = 5000;

/** Row is one row of the table: a param, an output or a metric. */
interface Row {
  group: "param" | "output" | "metric";
  step?: string;
  name: string;
  differs: boolean;
  cells: Node[];
  best?: number;
  worst?: number;
}

export class ComparePage implements View {
  readonly el = h("section", { class: "page compare" });
  private readonly table = h("div", { class: "card table-card", id: "compare-host" });
  private readonly charts = h("div", { class: "card", id: "series", hidden: true });
  private readonly onlyDiffs = h("input", { type: "checkbox", id: "only-diffs", checked: true });
  private readonly abort = new AbortController();
  private timer?: number;
  private cmp?: RunComparison;

  constructor(
    private readonly project: string,
    private readonly runs: string[],
  ) {
    this.onlyDiffs.addEventListener("change", () => this.render());
    replace(
      this.el,
      h(
        "div",
        { class: "page-head" },
        h("h1", {}, "Compare runs"),
        h("label", { class: "toggle", for: "only-diffs" }, this.onlyDiffs, " only differences"),
        h("span", { class: "spacer" }),
        h("a", { href: href.runs(project) }, "← Runs"),
      ),
      this.table,
      this.charts,
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
    const q = new URLSearchParams();
    for (const r of this.runs) q.append("runs", r);
    try {
      this.cmp = await get<RunComparison>(`/v1/projects/${enc(this.project)}/compare?${q}`, this.abort.signal);
    } catch (e) {
      if (this.abort.signal.aborted) return;
      // A refresh that fails keeps what the page showed, with the error above it.
      replace(this.table, errorBox(e), this.cmp ? this.tableEl(this.cmp) : null);
      if (!this.cmp) this.charts.hidden = true;
      return;
    }
    this.render();
    if (this.cmp.runs.some((r) => !runTerminal(r.state)) && !this.abort.signal.aborted) this.timer = window.setTimeout(() => void this.load(), REFRESH_MS);
  }

  private render(): void {
    const c = this.cmp;
    if (!c) return;
    replace(this.table, this.tableEl(c));
    this.renderCharts(c);
  }

  private tableEl(c: RunComparison): HTMLElement {
    const only = this.onlyDiffs.checked;
    const n = c.runs.length;
    const groups: [string, Row[], string][] = [
      ["Parameters", c.params.map((v) => valueRow("param", v)), "No run has parameters."],
      ["Outputs", c.outputs.map((v) => valueRow("output", v)), "No step has outputs."],
      ["Metrics", c.metrics.map(metricRow), "No step reported metrics."],
    ];
    return h(
      "table",
      { class: "list compare", id: "compare", "data-only-diffs": only },
      h("thead", {}, h("tr", {}, h("th", { class: "rowhead" }), c.runs.map((r, i) => this.runHead(r, i)))),
      groups.map(([title, rows, none]) => {
        const shown = only ? rows.filter((r) => r.differs) : rows;
        const differ = rows.filter((r) => r.differs).length;
        const note = rows.length ? ` · ${differ} of ${rows.length} differ` : "";
        return h(
          "tbody",
          { "data-group": title.toLowerCase() },
          h("tr", { class: "group" }, h("th", { colspan: n + 1 }, title, h("span", { class: "muted" }, note), title === "Metrics" && rows.some((r) => r.best !== undefined) ? h("span", { class: "muted legend-note" }, " · ▲ highest  ▼ lowest") : null)),
          shown.map((r) =>
            h(
              "tr",
              { class: r.differs ? "row differs" : "row same", "data-group": r.group, "data-step": r.step, "data-name": r.name },
              h("th", { class: "rowhead", scope: "row" }, r.step ? [h("span", { class: "muted" }, `${r.step}.`), r.name] : r.name),
              r.cells.map((cell, i) =>
                h(
                  "td",
                  { class: i === r.best ? "best" : i === r.worst ? "worst" : "", "data-run": c.runs[i].id, title: i === r.best ? "highest" : i === r.worst ? "lowest" : null },
                  cell,
                  i === r.best ? h("span", { class: "mark" }, " ▲") : i === r.worst ? h("span", { class: "mark" }, " ▼") : null,
                ),
              ),
            ),
          ),
          !shown.length ? h("tr", { class: "none" }, h("td", { colspan: n + 1, class: "muted" }, rows.length ? `The ${n} runs agree on all ${rows.length}.` : none)) : null,
        );
      }),
    );
  }

  private runHead(r: ComparedRun, i: number): HTMLElement {
    return h(
      "th",
      { class: "run", "data-run": r.id, scope: "col" },
      h("div", { class: "run-id" }, h("span", { class: `swatch ${colour(i)}` }), h("a", { class: "mono", href: href.run(this.project, r.id) }, r.id)),
      h(
        "div",
        { class: "run-pipeline" },
        r.pipeline ? h("a", { href: href.pipeline(this.project, r.pipeline, r.version) }, r.pipeline, h("span", { class: "muted" }, ` v${r.version ?? ""}`)) : h("span", {}, r.workflow, h("span", { class: "muted" }, " (Go)")),
      ),
      h("div", {}, badge(r.state)),
      h("div", { class: "muted small nowrap" }, fmtTime(r.createdAt), r.createdBy ? ` · ${r.createdBy}` : ""),
    );
  }

  private renderCharts(c: RunComparison): void {
    const only = this.onlyDiffs.checked;
    const shown = only ? c.series.filter(seriesDiffers) : c.series;
    const hidden = c.series.length - shown.length;
    this.charts.hidden = !c.series.length;
    replace(
      this.charts,
      h("div", { class: "card-title" }, h("h2", {}, "Curves"), hidden ? h("span", { class: "muted small" }, `${hidden} the same in every run, hidden`) : null),
      shown.length ? h("div", { class: "charts" }, shown.map((x) => this.chart(c, x))) : null,
    );
  }

  private chart(c: RunComparison, x: ComparedSeries): HTMLElement {
    const title = `${x.step}.${x.name}`;
    const lines = c.runs.map((r, i) => ({ run: r.id, values: x.values[i], cls: colour(i) }));
    return h(
      "figure",
      { class: "series-chart", "data-step": x.step, "data-name": x.name },
      h("figcaption", { class: "mono" }, h("span", { class: "muted" }, `${x.step}.`), x.name),
      lineChart(title, lines),
      h(
        "ul",
        { class: "chart-legend" },
        lines.map((l) =>
          h(
            "li",
            { "data-run": l.run, class: l.values?.length ? "" : "absent" },
            h("span", { class: `swatch ${l.cls}` }),
            h("a", { class: "mono", href: href.run(this.project, l.run) }, l.run),
            l.values?.length ? null : h("span", { class: "muted" }, " (none)"),
          ),
        ),
      ),
    );
  }
}

/** valueRow is a param's or an output's row: each value as text (JSON but for strings). */
function valueRow(group: "param" | "output", v: ComparedValue): Row {
  return { group, step: v.step, name: v.name, differs: v.differs, cells: v.values.map(valueCell) };
}

function valueCell(v: unknown): Node {
  if (v === null || v === undefined) return h("span", { class: "missing muted", title: "none" }, "—");
  const text = typeof v === "string" ? v : (JSON.stringify(v) ?? "");
  return h("span", { class: typeof v === "string" ? "value" : "value mono", title: text.length > 60 ? text : null }, text.length > 200 ? `${text.slice(0, 200)}…` : text);
}

function metricRow(m: ComparedMetric): Row {
  return {
    group: "metric",
    step: m.step,
    name: m.name,
    differs: m.differs,
    best: m.best,
    worst: m.worst,
    cells: m.values.map((v) => (v === null || v === undefined ? h("span", { class: "missing muted", title: "none" }, "—") : h("span", { class: "value mono", title: String(v) }, fmtValue(v)))),
  };
}

/** seriesDiffers: not every run has the same curve (a run without it differs). */
function seriesDiffers(x: ComparedSeries): boolean {
  const first = JSON.stringify(x.values[0] ?? null);
  return x.values.some((v) => JSON.stringify(v ?? null) !== first);
}
