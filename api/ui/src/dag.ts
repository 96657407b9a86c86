// The pipeline DAG as an SVG: planned steps and their dependencies from the
// pipeline version's graph (GET pipeline version), states from the run's
// status. Layout by dagre (top to bottom); a layout is computed once per
// shape (steps and edges) and states are patched in place, so live updates
// neither move nodes nor replace the elements a user is pointing at.

import { graphlib, layout } from "@dagrejs/dagre";
import { s } from "./dom";
import type { PipelineGraphStep, StepState, StepStatus } from "./types";

/** NodeState is a step's state, or PLANNED for a step not started yet. */
export type NodeState = StepState | "PLANNED";

export interface DagNode {
  name: string;
  kind: string;
  state: NodeState;
  forEach: boolean;
  /** forEach: items per state, in display order. */
  counts: [StepState, number][];
  items: number;
  /** attempts of the step (of its items, the most any item took). */
  attempts: number;
  cached: boolean;
  when?: string;
  runIf?: string;
}

export interface DagModel {
  nodes: DagNode[];
  edges: [string, string][];
  /** false: a Go pipeline, whose dependencies are not declared anywhere. */
  declared: boolean;
}

const COUNT_ORDER: StepState[] = [
  "SUCCEEDED",
  "CACHED",
  "RUNNING",
  "RETRYING",
  "WAITING_FOR_GPU",
  "WAITING_FOR_APPROVAL",
  "PENDING",
  "FAILED",
  "CANCELLED",
  "SKIPPED",
];

function maxAttempts(st: StepStatus): number {
  let n = st.attempts?.length ?? 0;
  for (const it of st.items ?? []) n = Math.max(n, it.attempts?.length ?? 0);
  return n;
}

/**
 * model joins the planned graph (absent for Go pipelines) with the steps
 * the run reports. Steps the graph does not list (a Go pipeline's, always)
 * are added in the order they appeared.
 */
export function model(graph: PipelineGraphStep[] | undefined, steps: StepStatus[]): DagModel {
  const byName = new Map(steps.map((st) => [st.name, st]));
  const nodes: DagNode[] = [];
  const edges: [string, string][] = [];
  const seen = new Set<string>();
  const add = (name: string, kind: string, st: StepStatus | undefined, g?: PipelineGraphStep) => {
    seen.add(name);
    const counts: [StepState, number][] = [];
    if (st?.items?.length) {
      const c = new Map<StepState, number>();
      for (const it of st.items) c.set(it.state, (c.get(it.state) ?? 0) + 1);
      for (const k of COUNT_ORDER) if (c.get(k)) counts.push([k, c.get(k)!]);
    }
    nodes.push({
      name,
      kind: st?.kind || kind,
      state: st?.state ?? "PLANNED",
      forEach: !!g?.forEach || !!st?.items,
      counts,
      items: st?.items?.length ?? 0,
      attempts: st ? maxAttempts(st) : 0,
      cached: st?.state === "CACHED" || !!st?.items?.some((it) => it.state === "CACHED"),
      when: g?.when,
      runIf: g?.runIf,
    });
  };
  for (const g of graph ?? []) {
    add(g.name, g.kind, byName.get(g.name), g);
    for (const d of g.dependsOn) edges.push([d, g.name]);
  }
  for (const st of steps) if (!seen.has(st.name)) add(st.name, st.kind, st);
  return { nodes, edges, declared: graph !== undefined };
}

const W = 220;
const H = 62;

function shapeKey(m: DagModel): string {
  return JSON.stringify([m.nodes.map((n) => n.name), m.edges]);
}

/** fit shortens text to about the characters that fit in px at the node font. */
function fit(text: string, px: number, charPx: number): string {
  const max = Math.max(4, Math.floor(px / charPx));
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

const LABEL: Record<string, string> = {
  PLANNED: "not started",
  WAITING_FOR_GPU: "waiting for GPU",
  WAITING_FOR_APPROVAL: "waiting for approval",
};

function stateLabel(st: NodeState): string {
  return LABEL[st] ?? st.toLowerCase();
}

/** DagView draws a DagModel into a container and keeps it current. */
export class DagView {
  private key = "";
  private groups = new Map<string, SVGElement>();
  private edgeEls: { from: string; el: SVGElement }[] = [];
  private selected?: string;

  constructor(
    private readonly root: HTMLElement,
    private readonly onSelect: (step: string) => void,
  ) {}

  update(m: DagModel): void {
    const key = shapeKey(m);
    if (key !== this.key) {
      this.key = key;
      this.build(m);
    }
    const states = new Map(m.nodes.map((n) => [n.name, n.state]));
    for (const n of m.nodes) this.patch(n);
    for (const e of this.edgeEls) e.el.setAttribute("data-state", states.get(e.from) ?? "PLANNED");
  }

  select(step: string | undefined): void {
    this.selected = step;
    for (const [name, g] of this.groups) g.classList.toggle("selected", name === step);
  }

  private build(m: DagModel): void {
    const g = new graphlib.Graph();
    // Top to bottom: pipelines are mostly deeper than wide, and the page
    // keeps the step drawer beside the graph.
    g.setGraph({ rankdir: "TB", nodesep: 28, ranksep: 42, marginx: 12, marginy: 12 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const n of m.nodes) g.setNode(n.name, { width: W, height: H });
    for (const [a, b] of m.edges) if (g.hasNode(a) && g.hasNode(b)) g.setEdge(a, b);
    if (!m.declared) {
      // No dependencies are known: stack the steps in the order they
      // appeared, with edges that order the layout but are not drawn.
      for (let i = 1; i < m.nodes.length; i++) g.setEdge(m.nodes[i - 1].name, m.nodes[i].name, { hidden: true });
    }
    layout(g);
    const gw = Math.max(g.graph().width ?? 0, W + 24);
    const gh = Math.max(g.graph().height ?? 0, H + 24);

    const svg = s("svg", {
      class: "dag",
      viewBox: `0 0 ${gw} ${gh}`,
      width: gw,
      height: gh,
      role: "group",
      "aria-label": "pipeline steps",
    });
    svg.appendChild(
      s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }))),
    );
    this.edgeEls = [];
    for (const e of g.edges()) {
      const label = g.edge(e) as { points?: { x: number; y: number }[]; hidden?: boolean };
      const pts = label.points ?? [];
      if (!pts.length || label.hidden) continue;
      let d = `M${pts[0].x},${pts[0].y}`;
      // Quadratic segments through dagre's control points: smooth, and
      // still ending on the node border.
      for (let i = 1; i < pts.length - 1; i++) {
        const mid = { x: (pts[i].x + pts[i + 1].x) / 2, y: (pts[i].y + pts[i + 1].y) / 2 };
        d += ` Q${pts[i].x},${pts[i].y} ${i === pts.length - 2 ? `${pts[i + 1].x},${pts[i + 1].y}` : `${mid.x},${mid.y}`}`;
      }
      if (pts.length === 2) d += ` L${pts[1].x},${pts[1].y}`;
      const el = s("path", { d, class: "edge", "marker-end": "url(#arrow)" });
      this.edgeEls.push({ from: e.v, el });
      svg.appendChild(el);
    }
    this.groups.clear();
    for (const n of m.nodes) {
      const pos = g.node(n.name);
      const grp = s(
        "g",
        {
          class: "node",
          "data-step": n.name,
          transform: `translate(${pos.x - W / 2},${pos.y - H / 2})`,
          tabindex: 0,
          role: "button",
          "aria-label": `step ${n.name}`,
          onclick: () => this.onSelect(n.name),
          onkeydown: ((ev: KeyboardEvent) => {
            if (ev.key === "Enter" || ev.key === " ") {
              ev.preventDefault();
              this.onSelect(n.name);
            }
          }) as EventListener,
        },
        s("title", {}, n.name),
        s("rect", { class: "box", width: W, height: H, rx: 8 }),
        s("rect", { class: "stripe", width: 6, height: H, rx: 3 }),
        s("text", { class: "name", x: 16, y: 22 }),
        s("text", { class: "sub", x: 16, y: 42 }),
        s("g", { class: "badges" }),
        s("g", { class: "bar", transform: `translate(16,${H - 10})` }),
      );
      this.groups.set(n.name, grp);
      svg.appendChild(grp);
    }
    this.root.replaceChildren(svg);
    this.select(this.selected);
  }

  private patch(n: DagNode): void {
    const grp = this.groups.get(n.name);
    if (!grp) return;
    grp.setAttribute("data-state", n.state);
    grp.setAttribute("aria-label", `step ${n.name}: ${stateLabel(n.state)}`);
    const sub = grp.querySelector("text.sub")!;
    let line = `${n.kind} · ${stateLabel(n.state)}`;
    if (n.forEach) {
      line = n.items ? `${n.items} items · ${n.counts.map(([st, c]) => `${c} ${stateLabel(st)}`).join(", ")}` : `forEach · ${stateLabel(n.state)}`;
    }
    sub.textContent = fit(line, W - 24, 6.3);

    // Badges, right-aligned on the name line.
    const badges: [string, string][] = [];
    if (n.forEach) badges.push(["each", "forEach"]);
    if (n.cached) badges.push(["cached", "cached"]);
    if (n.attempts > 1) badges.push(["retry", `${n.attempts} attempts`]);
    const bg = grp.querySelector("g.badges")!;
    bg.replaceChildren();
    let x = W - 8;
    for (const [cls, text] of badges) {
      const w = 8 + text.length * 6.4;
      x -= w;
      bg.appendChild(s("g", { class: `pill ${cls}`, transform: `translate(${x},9)` }, s("rect", { width: w, height: 17, rx: 8.5 }), s("text", { x: w / 2, y: 12.5 }, text)));
      x -= 4;
    }
    // The name gets what the badges leave (its full text is the node's title).
    grp.querySelector("text.name")!.textContent = fit(n.name, x - 16, 7.6);

    // forEach: a stacked bar of item states under the text.
    const bar = grp.querySelector("g.bar")!;
    bar.replaceChildren();
    if (n.forEach && n.items) {
      const total = W - 32;
      let bx = 0;
      for (const [st, c] of n.counts) {
        const w = (total * c) / n.items;
        bar.appendChild(s("rect", { x: bx, y: 0, width: Math.max(w, 1), height: 4, "data-state": st, class: "seg" }));
        bx += w;
      }
    }
  }
}
