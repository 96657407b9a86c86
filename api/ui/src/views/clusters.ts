// Clusters and GPUs: the page for "why is my GPU step still waiting".
//
// The list (#/p/<project>/clusters) puts first the project's GPU steps
// waiting for admission, over every cluster, each with its place in its
// cluster's queue and the reason it waits; then the registered clusters
// with their capacity by GPU type, the project's quotas with what it uses
// (for an admin: every project's), and the GPU inventory. A cluster's page
// (#/p/<project>/clusters/<name>) has its capacity, its whole admission
// queue (pending in decision order, then running) and its GPU nodes.
// Both refresh every few seconds.
//
// Clusters, the inventory and the queues are readable by any token; a
// queue shows other projects' workloads without their names (their place
// and size only) unless the token is an admin's. A project's GPU policy is
// readable by its members; 404 means it has none.

import { ApiError, enc, get } from "../api";
import { type Child, fmtBytes, fmtDuration, fmtTime, h, replace, s } from "../dom";
import { href } from "../route";
import type { AdmissionQueue, Cluster, GPUAmount, GPUPolicy, GPUTypeSummary, Project, QueueEntry, ResourceAmount } from "../types";
import { errorBox, message, type View } from "./view";

const REFRESH_MS = 5000;

/** What each wait reason (gpu.WaitReason) means, for people. */
export const WAIT_REASONS: Record<string, string> = {
  Quota: "the project's GPU quota (its nominal quota plus what it may borrow now) is used up; it is admitted when the project's running GPU steps give GPUs back",
  Capacity: "the cluster has too few free GPUs of this type right now",
  NoNodeFits: "enough GPUs are free in total, but no set of nodes fits its pods (free GPUs per node, taints, readiness)",
  NeverFits: "it would not fit even on an idle cluster: it asks more than the nodes offer, so it will not run as submitted",
  Reservation: "it would fit, but only in GPUs held for a workload ranked before it",
  Preemption: "lower-priority workloads are being preempted for it; it is admitted once they end",
  Invalid: "it can never be admitted as submitted (see the message)",
};

/** Queues is each cluster's admission queue, or why it could not be read. */
type Queues = Map<string, AdmissionQueue | Error>;

async function loadQueues(clusters: Cluster[], signal: AbortSignal): Promise<Queues> {
  const out: Queues = new Map();
  await Promise.all(
    clusters.map(async (c) => {
      try {
        out.set(c.name, await get<AdmissionQueue>(`/v1/clusters/${enc(c.name)}/queue`, signal));
      } catch (e) {
        out.set(c.name, e instanceof Error ? e : new Error(String(e)));
      }
    }),
  );
  return out;
}

/** gpusText: "2 × NVIDIA-L4 + 1 × nvidia.com/mig-1g.10gb". */
function gpusText(gpus: GPUAmount[]): string {
  return gpus.map((g) => `${g.units} × ${g.resource}`).join(" + ");
}

/** meter is a small bar of used out of total (SVG: the page's CSP allows no style attributes). */
function meter(used: number, total: number, title: string): SVGElement {
  const w = total > 0 ? Math.max(0, Math.min(100, (used / total) * 100)) : 0;
  return s(
    "svg",
    { class: "meter", viewBox: "0 0 100 8", preserveAspectRatio: "none", width: 96, height: 8, role: "img", "aria-label": title },
    s("title", {}, title),
    s("rect", { class: "meter-bg", x: 0, y: 0, width: 100, height: 8 }),
    s("rect", { class: used > total ? "meter-used over" : "meter-used", x: 0, y: 0, width: w, height: 8 }),
  );
}

function reasonBadge(reason?: string): HTMLElement {
  return h("span", { class: "reason", "data-reason": reason ?? "", title: reason ? WAIT_REASONS[reason] ?? "" : "" }, reason ?? "not decided yet");
}

/** whyPending is the reason, the admission's message and what the reason means. */
function whyPending(e: QueueEntry): HTMLElement {
  const means = e.reason ? WAIT_REASONS[e.reason] : undefined;
  return h(
    "div",
    { class: "why" },
    h("div", {}, reasonBadge(e.reason), e.message ? h("span", { class: "why-message" }, " ", e.message) : null),
    means ? h("div", { class: "muted small" }, means) : null,
  );
}

/** itemOf is the forEach item of a workload ID (`<run>/<step>/<item>`). */
function itemOf(e: QueueEntry): number | undefined {
  const parts = (e.workload ?? "").split("/");
  return parts.length === 3 && /^\d+$/.test(parts[2]) ? Number(parts[2]) : undefined;
}

/** workloadCell links a visible workload to its run (and step); another project's is anonymous. */
function workloadCell(e: QueueEntry, fallbackProject: string): HTMLElement {
  if (!e.run) return h("span", { class: "muted" }, e.workload ?? "another project's workload");
  const project = e.project ?? fallbackProject;
  const item = itemOf(e);
  return h(
    "span",
    { class: "workload" },
    h("a", { class: "mono", href: href.run(project, e.run, e.step, item), title: e.workload ?? "" }, e.run),
    e.step ? [h("span", { class: "muted" }, " · step "), h("a", { href: href.run(project, e.run, e.step, item) }, e.step), item !== undefined ? h("span", { class: "muted" }, ` [${item}]`) : null] : null,
  );
}

function gpuCapacityList(c: Cluster): HTMLElement {
  const gpus = Object.entries(c.capacity?.gpus ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (!c.capacity) return h("span", { class: "muted" }, "not reported yet");
  if (!gpus.length) return h("span", { class: "muted" }, "no GPUs");
  return h(
    "ul",
    { class: "gpu-cap" },
    gpus.map(([type, a]) => capacityItem(type, a)),
  );
}

function capacityItem(type: string, a: ResourceAmount): HTMLElement {
  const used = a.total - a.free;
  return h(
    "li",
    { "data-gpu": type },
    h("span", { class: "gpu-type", title: type }, type),
    meter(used, a.total, `${used} of ${a.total} used`),
    h("span", { class: "gpu-nums" }, h("b", { class: a.free > 0 ? "free" : "free none" }, `${a.free} free`), h("span", { class: "muted" }, ` · ${used} used · ${a.total} total`)),
  );
}

function cpuText(a?: ResourceAmount): string {
  if (!a) return "";
  const c = (m: number) => String(Math.round(m / 100) / 10);
  return `${c(a.free)} of ${c(a.total)} free`;
}

function memText(a?: ResourceAmount): string {
  return a ? `${fmtBytes(a.free)} of ${fmtBytes(a.total)} free` : "";
}

function onlineBadge(c: Cluster): HTMLElement {
  return h(
    "span",
    { class: "badge", "data-state": c.online ? "SUCCEEDED" : "CANCELLED", "data-online": String(c.online), title: c.lastSeenAt ? `last report ${fmtTime(c.lastSeenAt)}` : "its worker never reported" },
    c.online ? "online" : "offline",
  );
}

function labelChips(labels: Record<string, string>): HTMLElement[] {
  return Object.entries(labels)
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([k, v]) => h("span", { class: "chip mono" }, `${k}=${v}`));
}

function limitText(v?: number): string {
  return v === undefined ? "0" : v < 0 ? "no limit" : String(v);
}

/** sums adds up the GPUs of entries by resource (those matching keep). */
function sums(entries: QueueEntry[], keep: (e: QueueEntry) => boolean = () => true): Map<string, number> {
  const m = new Map<string, number>();
  for (const e of entries) if (keep(e)) for (const g of e.gpus) m.set(g.resource, (m.get(g.resource) ?? 0) + g.units);
  return m;
}

function allEntries(queues: Queues, which: "pending" | "running"): QueueEntry[] {
  const out: QueueEntry[] = [];
  for (const q of queues.values()) if (!(q instanceof Error)) out.push(...q[which]);
  return out;
}

/** refreshNote says when the page was last refreshed and how often it is. */
function refreshNote(el: HTMLElement, at: Date): void {
  el.textContent = `updated ${at.toLocaleTimeString()} · refreshes every ${REFRESH_MS / 1000}s`;
}

/** The list: waiting steps, clusters, quotas and usage, GPU inventory. */
export class ClustersPage implements View {
  readonly el = h("section", { class: "page clusters" });
  private readonly note = h("span", { class: "muted small", id: "refresh-note" });
  private readonly waiting = h("div", { class: "card", id: "waiting" });
  private readonly clusters = h("div", { class: "card table-card", id: "clusters-card" });
  private readonly quotas = h("div", { class: "card", id: "quotas" });
  private readonly inventory = h("div", { class: "card table-card", id: "gpus-card" });
  private readonly problem = h("div", {});
  private readonly abort = new AbortController();
  private timer?: number;
  private loaded = false;

  constructor(
    private readonly project: string,
    /** The projects the token sees: its own, or all of them for an admin. */
    private readonly projects: Project[],
  ) {
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Clusters and GPUs"), h("span", { class: "spacer" }), this.note),
      this.problem,
      this.waiting,
      this.clusters,
      this.quotas,
      this.inventory,
    );
    replace(this.waiting, h("p", { class: "muted" }, "Loading…"));
    this.clusters.hidden = this.quotas.hidden = this.inventory.hidden = true;
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
      const [clusters, gpus] = await Promise.all([
        get<{ clusters: Cluster[] }>("/v1/clusters", signal).then((r) => r.clusters),
        get<{ gpus: GPUTypeSummary[] }>("/v1/gpus", signal).then((r) => r.gpus),
      ]);
      // Admins see every project: each one's policy (at most 50 asked).
      const names = this.projects.some((p) => p.name === this.project) ? this.projects.map((p) => p.name) : [this.project];
      const [queues, policies] = await Promise.all([loadQueues(clusters, signal), this.loadPolicies(names.slice(0, 50), signal)]);
      if (signal.aborted) return;
      replace(this.problem);
      this.render(clusters, gpus, queues, policies);
      this.loaded = true;
      refreshNote(this.note, new Date());
    } catch (e) {
      if (signal.aborted) return;
      // A failed refresh keeps what the page showed, with the error above.
      replace(this.problem, errorBox(e));
      if (!this.loaded) this.waiting.hidden = true;
    }
    if (!signal.aborted) this.timer = window.setTimeout(() => void this.load(), REFRESH_MS);
  }

  private async loadPolicies(names: string[], signal: AbortSignal): Promise<Map<string, GPUPolicy | Error | null>> {
    const out = new Map<string, GPUPolicy | Error | null>();
    await Promise.all(
      names.map(async (p) => {
        try {
          out.set(p, await get<GPUPolicy>(`/v1/projects/${enc(p)}/gpu-policy`, signal));
        } catch (e) {
          // 404: the project has no policy (so no GPU quota).
          out.set(p, e instanceof ApiError && e.status === 404 ? null : e instanceof Error ? e : new Error(String(e)));
        }
      }),
    );
    return out;
  }

  private render(clusters: Cluster[], gpus: GPUTypeSummary[], queues: Queues, policies: Map<string, GPUPolicy | Error | null>): void {
    this.clusters.hidden = this.quotas.hidden = this.inventory.hidden = false;
    this.waiting.hidden = false;
    this.renderWaiting(clusters, queues);
    this.renderClusters(clusters, queues);
    this.renderQuotas(queues, policies);
    this.renderInventory(gpus, queues);
  }

  /** The project's GPU steps waiting for admission, over every cluster. */
  private renderWaiting(clusters: Cluster[], queues: Queues): void {
    const rows: { cluster: string; e: QueueEntry; ahead: number; total: number }[] = [];
    for (const c of clusters) {
      const q = queues.get(c.name);
      if (!q || q instanceof Error) continue;
      for (const e of q.pending) if (e.project === this.project) rows.push({ cluster: c.name, e, ahead: (e.position ?? 1) - 1, total: q.pending.length });
    }
    rows.sort((a, b) => (a.cluster < b.cluster ? -1 : a.cluster > b.cluster ? 1 : (a.e.position ?? 0) - (b.e.position ?? 0)));
    const unread = clusters.filter((c) => queues.get(c.name) instanceof Error);
    replace(
      this.waiting,
      h("div", { class: "card-title" }, h("h2", {}, `Waiting for GPUs in ${this.project}`), h("span", { class: "muted small" }, "its GPU steps not admitted yet, in each cluster's decision order")),
      rows.length
        ? h(
            "table",
            { class: "list", id: "waiting-steps" },
            h("thead", {}, h("tr", {}, ["Position", "Run and step", "Cluster", "Asks", "Waiting", "Why it waits"].map((t) => h("th", {}, t)))),
            h(
              "tbody",
              {},
              rows.map(({ cluster, e, ahead, total }) =>
                h(
                  "tr",
                  { "data-run": e.run ?? "", "data-step": e.step ?? "", "data-cluster": cluster, "data-reason": e.reason ?? "", "data-position": String(e.position ?? "") },
                  h("td", { class: "nowrap" }, h("span", { class: "position" }, `#${e.position ?? "?"}`), h("div", { class: "muted small" }, `of ${total} pending${ahead ? `, ${ahead} ahead` : ""}`)),
                  h("td", {}, workloadCell(e, this.project)),
                  h("td", { class: "nowrap" }, h("a", { href: href.clusters(this.project, cluster) }, cluster)),
                  h("td", { class: "nowrap" }, gpusText(e.gpus), e.priority !== undefined ? h("div", { class: "muted small" }, `priority ${e.priority}`) : null),
                  h("td", { class: "nowrap", title: `submitted ${fmtTime(e.submitted)}` }, fmtDuration(e.submitted)),
                  h("td", { class: "why-cell" }, whyPending(e)),
                ),
              ),
            ),
          )
        : h("p", { class: "empty", id: "no-waiting" }, clusters.length ? `No GPU step of ${this.project} is waiting for GPUs.` : "No cluster is registered: GPU steps need a Kubernetes cluster."),
      unread.length ? h("div", { class: "alert warn" }, `The admission queue of ${unread.map((c) => c.name).join(", ")} could not be read: ${unread.map((c) => message(queues.get(c.name))).join("; ")}`) : null,
    );
  }

  private renderClusters(clusters: Cluster[], queues: Queues): void {
    replace(
      this.clusters,
      clusters.length
        ? h(
            "table",
            { class: "list", id: "clusters" },
            h("thead", {}, h("tr", {}, ["Cluster", "Worker", "GPUs at its last report (free · used · total)", "CPU cores", "Memory", "Nodes", "Admission queue"].map((t) => h("th", {}, t)))),
            h(
              "tbody",
              {},
              clusters.map((c) => {
                const q = queues.get(c.name);
                return h(
                  "tr",
                  { "data-cluster": c.name },
                  h(
                    "td",
                    {},
                    h("a", { href: href.clusters(this.project, c.name), class: "cluster-name" }, c.name),
                    c.description ? h("div", { class: "muted small" }, c.description) : null,
                    Object.keys(c.labels ?? {}).length ? h("div", { class: "chips" }, labelChips(c.labels)) : null,
                  ),
                  h("td", { class: "nowrap" }, onlineBadge(c), h("div", { class: "muted small" }, c.lastSeenAt ? `seen ${fmtDuration(c.lastSeenAt)} ago` : "never reported")),
                  h("td", {}, gpuCapacityList(c)),
                  h("td", { class: "nowrap" }, cpuText(c.capacity?.cpuMillis)),
                  h("td", { class: "nowrap" }, memText(c.capacity?.memoryBytes)),
                  h("td", {}, c.capacity ? String(c.capacity.nodes) : ""),
                  h(
                    "td",
                    { class: "nowrap queue-summary" },
                    c.capacity?.kueueQueue
                      ? h("span", { title: "Kueue, not Atelier, admits this cluster's Jobs and RayJobs" }, "Kueue: ", h("span", { class: "mono" }, c.capacity.kueueQueue))
                      : q instanceof Error
                        ? h("span", { class: "error-text", title: message(q) }, "unreadable")
                        : q
                          ? h("a", { href: href.clusters(this.project, c.name) }, `${q.pending.length} pending · ${q.running.length} running`)
                          : null,
                  ),
                );
              }),
            ),
          )
        : h("p", { class: "empty" }, "No cluster is registered. A cluster's worker (atelier worker --cluster NAME) registers it when it starts."),
    );
  }

  /** Each visible project's quotas beside the GPUs its workloads hold and wait for. */
  private renderQuotas(queues: Queues, policies: Map<string, GPUPolicy | Error | null>): void {
    const running = allEntries(queues, "running");
    const pending = allEntries(queues, "pending");
    const names = [...policies.keys()].sort((a, b) => (a === this.project ? -1 : b === this.project ? 1 : a < b ? -1 : 1));
    replace(
      this.quotas,
      h("div", { class: "card-title" }, h("h2", {}, "Quotas and usage"), h("span", { class: "muted small" }, "in use: the GPUs the project's admitted workloads hold, over the clusters' queues")),
      names.map((p) => {
        const pol = policies.get(p);
        const used = sums(running, (e) => e.project === p);
        const waiting = sums(pending, (e) => e.project === p);
        let body: Child;
        if (pol === null) {
          body = h("p", { class: "muted no-policy" }, "No GPU policy: this project has no GPU quota. Once any project has one, GPU admission is on and GPU steps of projects without a policy fail, saying so.");
        } else if (pol instanceof Error || pol === undefined) {
          body = errorBox(pol);
        } else {
          const resources = [...new Set([...pol.quotas.map((q) => q.resource), ...used.keys(), ...waiting.keys()])];
          body = [
            h(
              "dl",
              { class: "meta small inline" },
              h("dt", {}, "cohort"),
              h("dd", {}, pol.cohort || "default"),
              h("dt", {}, "weight"),
              h("dd", {}, String(pol.weight || 1)),
              h("dt", {}, "priority"),
              h("dd", {}, `${pol.defaultPriority ?? 0} by default, ${pol.minPriority ?? 0} to ${pol.maxPriority ?? 0} allowed`),
            ),
            (pol.warnings ?? []).map((w) => h("div", { class: "alert warn" }, w)),
            h(
              "table",
              { class: "list compact quota-table" },
              h("thead", {}, h("tr", {}, ["GPU", "In use", "", "Quota (nominal)", "May borrow", "Lends", "Waiting"].map((t) => h("th", {}, t)))),
              h(
                "tbody",
                {},
                resources.map((r) => {
                  const q = pol.quotas.find((x) => x.resource === r);
                  const u = used.get(r) ?? 0;
                  const nominal = q?.nominal ?? 0;
                  return h(
                    "tr",
                    { "data-resource": r, "data-used": String(u), "data-nominal": String(nominal) },
                    h("td", { class: "mono" }, r),
                    h("td", { class: "nowrap used" }, `${u} of ${nominal}`),
                    h("td", {}, meter(u, nominal, `${u} of ${nominal} in use`)),
                    h("td", {}, q ? String(q.nominal) : h("span", { class: "muted" }, "none")),
                    h("td", {}, q ? limitText(q.borrowingLimit) : ""),
                    h("td", {}, q ? limitText(q.lendingLimit) : ""),
                    h("td", { class: "waiting" }, waiting.get(r) ? `${waiting.get(r)}` : h("span", { class: "muted" }, "0")),
                  );
                }),
              ),
            ),
          ];
        }
        return h("div", { class: "quota", "data-project": p }, h("h3", {}, p, p === this.project ? h("span", { class: "muted" }, " (this project)") : null), body);
      }),
    );
  }

  private renderInventory(gpus: GPUTypeSummary[], queues: Queues): void {
    const admitted = sums(allEntries(queues, "running"));
    replace(
      this.inventory,
      h("div", { class: "card-title pad" }, h("h2", {}, "GPU inventory"), h("span", { class: "muted small" }, "ready, schedulable nodes of every cluster, by GPU type")),
      gpus.length
        ? h(
            "table",
            { class: "list", id: "gpus" },
            h("thead", {}, h("tr", {}, ["GPU type", "Memory", "Clusters", "Nodes", "Allocatable", "Admitted to Atelier", "Held by other pods", "Available"].map((t) => h("th", {}, t)))),
            h(
              "tbody",
              {},
              gpus.map((g) => {
                const a = admitted.get(g.resource) ?? 0;
                return h(
                  "tr",
                  { "data-gpu": g.resource },
                  h("td", { class: "mono" }, g.resource),
                  h("td", { class: "nowrap" }, g.memoryMiB ? fmtBytes(g.memoryMiB * 1024 * 1024) : ""),
                  h("td", {}, g.clusters.map((c, i) => [i ? ", " : "", h("a", { href: href.clusters(this.project, c) }, c)])),
                  h("td", {}, String(g.nodes)),
                  h("td", {}, String(g.allocatable)),
                  h("td", {}, String(a)),
                  h("td", {}, String(g.inUse)),
                  h("td", { class: "available" }, String(Math.max(0, g.allocatable - g.inUse - a))),
                );
              }),
            ),
          )
        : h("p", { class: "empty" }, "No GPU on the registered clusters' ready nodes."),
    );
  }
}

/** One cluster: capacity, admission queue, GPU nodes. */
export class ClusterPage implements View {
  readonly el = h("section", { class: "page cluster" });
  private readonly note = h("span", { class: "muted small", id: "refresh-note" });
  private readonly problem = h("div", {});
  private readonly head = h("div", { class: "card" });
  private readonly capacity = h("div", { class: "card" });
  private readonly queue = h("div", { class: "card", id: "queue" });
  private readonly nodes = h("div", { class: "card table-card" });
  private readonly abort = new AbortController();
  private timer?: number;
  private loaded = false;

  constructor(
    private readonly project: string,
    private readonly name: string,
  ) {
    replace(
      this.el,
      h("div", { class: "page-head" }, h("h1", {}, "Cluster ", h("span", { class: "mono" }, name)), h("span", { class: "spacer" }), this.note, h("a", { href: href.clusters(project) }, "← Clusters")),
      this.problem,
      this.head,
      this.queue,
      this.capacity,
      this.nodes,
    );
    replace(this.head, h("p", { class: "muted" }, "Loading…"));
    this.queue.hidden = this.capacity.hidden = this.nodes.hidden = true;
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
      const c = await get<Cluster>(`/v1/clusters/${enc(this.name)}`, signal);
      let q: AdmissionQueue | Error;
      try {
        q = await get<AdmissionQueue>(`/v1/clusters/${enc(this.name)}/queue`, signal);
      } catch (e) {
        if (signal.aborted) return;
        q = e instanceof Error ? e : new Error(String(e));
      }
      if (signal.aborted) return;
      replace(this.problem);
      this.render(c, q);
      this.loaded = true;
      refreshNote(this.note, new Date());
    } catch (e) {
      if (signal.aborted) return;
      replace(this.problem, errorBox(e));
      if (!this.loaded) this.head.hidden = true;
      // A cluster that is not registered stays so: no refresh.
      if (e instanceof ApiError && e.status === 404) return;
    }
    if (!signal.aborted) this.timer = window.setTimeout(() => void this.load(), REFRESH_MS);
  }

  private render(c: Cluster, q: AdmissionQueue | Error): void {
    this.head.hidden = this.queue.hidden = this.capacity.hidden = this.nodes.hidden = false;
    replace(
      this.head,
      h("div", { class: "card-title" }, onlineBadge(c), c.description ? h("span", {}, c.description) : null),
      h(
        "dl",
        { class: "meta" },
        h("dt", {}, "worker"),
        h("dd", {}, c.lastSeenAt ? `last report ${fmtTime(c.lastSeenAt)} (${fmtDuration(c.lastSeenAt)} ago)` : "never reported", c.online ? "" : " — offline: no report in the last 2 minutes"),
        h("dt", {}, "task queue"),
        h("dd", { class: "mono" }, c.taskQueue),
        h("dt", {}, "admission"),
        h("dd", {}, c.capacity?.kueueQueue ? ["Kueue admits its Jobs and RayJobs (LocalQueue ", h("span", { class: "mono" }, c.capacity.kueueQueue), "): a waiting step shows Kueue's reason on its run's page"] : "Atelier's GPU admission"),
        h("dt", {}, "labels"),
        h("dd", {}, Object.keys(c.labels ?? {}).length ? h("span", { class: "chips" }, labelChips(c.labels)) : h("span", { class: "muted" }, "none")),
        h("dt", {}, "registered"),
        h("dd", {}, fmtTime(c.createdAt)),
      ),
    );
    this.renderCapacity(c, q);
    this.renderQueue(q);
    this.renderNodes(c);
  }

  private renderCapacity(c: Cluster, q: AdmissionQueue | Error): void {
    const cap = c.capacity;
    const admitted = q instanceof Error ? undefined : sums(q.running);
    const gpus = Object.entries(cap?.gpus ?? {}).sort(([a], [b]) => (a < b ? -1 : 1));
    replace(
      this.capacity,
      h(
        "div",
        { class: "card-title" },
        h("h2", {}, "Capacity"),
        h("span", { class: "muted small" }, "ready, schedulable nodes as its worker last reported them (every 30 s); used: requested by the pods bound to them; admitted: held now by Atelier's admitted workloads (its queue)"),
      ),
      !cap
        ? h("p", { class: "muted" }, "Its worker has not reported capacity yet.")
        : [
            gpus.length
              ? h(
                  "table",
                  { class: "list compact", id: "capacity" },
                  h("thead", {}, h("tr", {}, ["GPU type", "Free", "Used", "Total", "", "Admitted"].map((t) => h("th", {}, t)))),
                  h(
                    "tbody",
                    {},
                    gpus.map(([type, a]) =>
                      h(
                        "tr",
                        { "data-gpu": type },
                        h("td", { class: "mono" }, type),
                        h("td", { class: "free" }, String(a.free)),
                        h("td", { class: "used" }, String(a.total - a.free)),
                        h("td", { class: "total" }, String(a.total)),
                        h("td", {}, meter(a.total - a.free, a.total, `${a.total - a.free} of ${a.total} used`)),
                        h("td", { class: "admitted" }, admitted ? String(admitted.get(type) ?? 0) : ""),
                      ),
                    ),
                  ),
                )
              : h("p", { class: "muted" }, "No GPUs."),
            h("dl", { class: "meta small" }, h("dt", {}, "CPU cores"), h("dd", {}, cpuText(cap.cpuMillis)), h("dt", {}, "memory"), h("dd", {}, memText(cap.memoryBytes)), h("dt", {}, "nodes"), h("dd", {}, String(cap.nodes))),
          ],
    );
  }

  private renderQueue(q: AdmissionQueue | Error): void {
    if (q instanceof Error) {
      replace(this.queue, h("h2", {}, "Admission queue"), errorBox(q));
      return;
    }
    replace(
      this.queue,
      h(
        "div",
        { class: "card-title" },
        h("h2", {}, "Admission queue"),
        h("span", { class: "muted small" }, q.decidedAt ? `decided ${fmtTime(q.decidedAt)}` : "no decision yet", " · other projects' workloads show their place and size only"),
      ),
      h("h3", {}, `Pending (${q.pending.length})`),
      q.pending.length
        ? h(
            "table",
            { class: "list", id: "pending" },
            h("thead", {}, h("tr", {}, ["#", "Workload", "Project", "Asks", "Priority", "Waiting", "Why pending"].map((t) => h("th", {}, t)))),
            h(
              "tbody",
              {},
              q.pending.map((e) =>
                h(
                  "tr",
                  {
                    class: e.project === this.project ? "mine" : "",
                    "data-run": e.run ?? "",
                    "data-step": e.step ?? "",
                    "data-reason": e.reason ?? "",
                    "data-position": String(e.position ?? ""),
                  },
                  h("td", { class: "position" }, String(e.position ?? "")),
                  h("td", {}, workloadCell(e, this.project)),
                  h("td", { class: "nowrap" }, e.project ?? h("span", { class: "muted" }, "another")),
                  h("td", { class: "nowrap" }, gpusText(e.gpus)),
                  h("td", {}, e.priority !== undefined ? String(e.priority) : ""),
                  h("td", { class: "nowrap", title: `submitted ${fmtTime(e.submitted)}` }, fmtDuration(e.submitted)),
                  h("td", { class: "why-cell" }, whyPending(e)),
                ),
              ),
            ),
          )
        : h("p", { class: "empty", id: "no-pending" }, "Nothing is waiting."),
      h("h3", {}, `Running (${q.running.length})`),
      q.running.length
        ? h(
            "table",
            { class: "list", id: "running" },
            h("thead", {}, h("tr", {}, ["Workload", "Project", "Holds", "Admitted", "Nodes"].map((t) => h("th", {}, t)))),
            h(
              "tbody",
              {},
              q.running.map((e) =>
                h(
                  "tr",
                  { class: e.project === this.project ? "mine" : "", "data-run": e.run ?? "", "data-step": e.step ?? "" },
                  h("td", {}, workloadCell(e, this.project)),
                  h("td", {}, e.project ?? h("span", { class: "muted" }, "another")),
                  h("td", { class: "nowrap" }, gpusText(e.gpus)),
                  h("td", { class: "nowrap" }, e.admitted ? `${fmtTime(e.admitted)} (${fmtDuration(e.admitted)} ago)` : ""),
                  h("td", { class: "mono small" }, (e.nodes ?? []).join(", ")),
                ),
              ),
            ),
          )
        : h("p", { class: "empty" }, "No admitted workload holds GPUs."),
    );
  }

  private renderNodes(c: Cluster): void {
    const nodes = c.capacity?.gpuNodes ?? [];
    replace(
      this.nodes,
      h("div", { class: "card-title pad" }, h("h2", {}, "GPU nodes"), h("span", { class: "muted small" }, `${nodes.length} node${nodes.length === 1 ? "" : "s"}, ready or not`)),
      nodes.length
        ? h(
            "table",
            { class: "list compact", id: "gpu-nodes" },
            h("thead", {}, h("tr", {}, ["Node", "GPU type", "GPU memory", "GPUs", "Held by other pods", "MIG slices", "State", "Taints"].map((t) => h("th", {}, t)))),
            h(
              "tbody",
              {},
              nodes.map((n) =>
                h(
                  "tr",
                  { "data-node": n.name },
                  h("td", { class: "mono" }, n.name),
                  h("td", { class: "mono" }, n.gpuType ?? ""),
                  h("td", { class: "nowrap" }, n.gpuMemoryMiB ? fmtBytes(n.gpuMemoryMiB * 1024 * 1024) : ""),
                  h("td", {}, String(n.gpus)),
                  h("td", {}, String(n.gpusInUse)),
                  h("td", { class: "small" }, (n.mig ?? []).map((m) => h("div", { class: "mono" }, `${m.profile}: ${m.allocatable - m.inUse} of ${m.allocatable} free`))),
                  h("td", {}, !n.ready ? h("span", { class: "badge", "data-state": "FAILED" }, "not ready") : n.unschedulable ? h("span", { class: "badge", "data-state": "CANCELLING" }, "cordoned") : h("span", { class: "badge", "data-state": "SUCCEEDED" }, "ready")),
                  h("td", { class: "mono small" }, (n.taints ?? []).map((t) => h("div", {}, `${t.key}${t.value ? `=${t.value}` : ""}:${t.effect}`))),
                ),
              ),
            ),
          )
        : h("p", { class: "empty" }, c.capacity ? "No GPU nodes." : "Not reported yet."),
    );
  }
}
