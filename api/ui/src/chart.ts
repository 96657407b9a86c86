// Small line charts as SVG, for the metrics a step reports: a sparkline of
// one series (the run page's drawer) and a chart of one series per run
// (the compare page). Points are evenly spaced (a series is a value per
// epoch or per evaluation, not a time). Colours come from app.css classes
// (c0…c9), never from style attributes, which the page's
// Content-Security-Policy refuses.

import { h, s } from "./dom";

/** The distinct line colours in app.css (.c0 … .c9); runs past them are drawn dashed. */
export const COLOURS = 10;

/** colour is the class of the i-th line: its colour, and "alt" (dashed) after the first COLOURS. */
export function colour(i: number): string {
  return `c${i % COLOURS}${i >= COLOURS ? " alt" : ""}`;
}

/** fmtNum renders a number for a label: integers as they are, others to 4 significant digits. */
export function fmtNum(v: number): string {
  if (!Number.isFinite(v) || Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  if (a >= 1e6 || a < 1e-4) return v.toExponential(2);
  return String(Number(v.toPrecision(4)));
}

/** fmtValue renders a metric's value in a table: as sent, unless that is long (6 significant digits then; the title has it all). */
export function fmtValue(v: number): string {
  const full = String(v);
  return full.length <= 10 ? full : String(Number(v.toPrecision(6)));
}

/** range is the lowest and highest of the values (of every list). */
function range(lists: number[][]): [number, number] {
  let lo = Infinity;
  let hi = -Infinity;
  for (const l of lists)
    for (const v of l) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  return [lo, hi];
}

const r2 = (v: number) => Math.round(v * 100) / 100;

/**
 * sparkline is one series, small: its line, its last point marked, and its
 * lowest and highest values as labels beside it.
 */
export function sparkline(name: string, values: number[]): HTMLElement {
  const W = 220;
  const H = 44;
  const P = 4;
  const [lo, hi] = range([values]);
  const x = (i: number) => r2(values.length > 1 ? P + (i * (W - 2 * P)) / (values.length - 1) : W / 2);
  const y = (v: number) => r2(hi === lo ? H / 2 : P + ((hi - v) * (H - 2 * P)) / (hi - lo));
  const last = values.length - 1;
  const svg = s(
    "svg",
    { class: "sparkline", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": `${name}: ${values.length} points from ${fmtNum(values[0])} to ${fmtNum(values[last])}` },
    s("title", {}, values.map(fmtNum).join(", ")),
    s("line", { class: "base", x1: P, x2: W - P, y1: y(lo), y2: y(lo) }),
    s("polyline", { class: "line", points: values.map((v, i) => `${x(i)},${y(v)}`).join(" ") }),
    s("circle", { class: "dot", cx: x(last), cy: y(values[last]), r: 2.5 }),
  );
  return h(
    "div",
    { class: "series", "data-series": name },
    h("div", { class: "series-name mono" }, name, h("span", { class: "muted" }, ` · ${values.length} ${values.length === 1 ? "point" : "points"}, last ${fmtNum(values[last])}`)),
    h(
      "div",
      { class: "series-plot" },
      svg,
      h("div", { class: "series-range small mono" }, h("span", { class: "max", title: "highest" }, `max ${fmtNum(hi)}`), h("span", { class: "min", title: "lowest" }, `min ${fmtNum(lo)}`)),
    ),
  );
}

/** Line is one run's series in a chart: null where the run has none. */
export interface Line {
  run: string;
  values: number[] | null;
  /** Its colour class (see colour). */
  cls: string;
}

/**
 * lineChart draws the series of several runs on one pair of axes: a
 * polyline per run that has the series (points marked when there are
 * few), the value range on the left, the point numbers below.
 */
export function lineChart(title: string, lines: Line[]): SVGElement {
  const W = 560;
  const H = 220;
  const L = 56;
  const R = 12;
  const T = 10;
  const B = 26;
  const present = lines.filter((l): l is Line & { values: number[] } => !!l.values?.length);
  let [lo, hi] = range(present.map((l) => l.values));
  if (lo === hi) {
    const d = lo === 0 ? 1 : Math.abs(lo) * 0.1;
    lo -= d;
    hi += d;
  }
  const n = Math.max(1, ...present.map((l) => l.values.length));
  const x = (i: number) => r2(n > 1 ? L + (i * (W - L - R)) / (n - 1) : L + (W - L - R) / 2);
  const y = (v: number) => r2(T + ((hi - v) * (H - T - B)) / (hi - lo));
  const ticks = [hi, (hi + lo) / 2, lo];
  return s(
    "svg",
    { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title },
    s("title", {}, title),
    ticks.map((v) => [s("line", { class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v) }), s("text", { class: "tick", x: L - 6, y: y(v) + 4, "text-anchor": "end" }, fmtNum(v))]),
    s("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }),
    s("text", { class: "tick", x: x(0), y: H - 8, "text-anchor": n > 1 ? "start" : "middle" }, "1"),
    n > 1 ? s("text", { class: "tick", x: x(n - 1), y: H - 8, "text-anchor": "end" }, String(n)) : null,
    present.map((l) =>
      s(
        "g",
        { class: `run-line ${l.cls}`, "data-run": l.run },
        s("title", {}, `${l.run}: ${l.values.map(fmtNum).join(", ")}`),
        l.values.length > 1 ? s("polyline", { class: "line", points: l.values.map((v, i) => `${x(i)},${y(v)}`).join(" ") }) : null,
        l.values.length <= 30 ? l.values.map((v, i) => s("circle", { class: "dot", cx: x(i), cy: y(v), r: 2.5 })) : null,
      ),
    ),
  );
}
