// Routes live in the URL fragment (#/p/<project>/runs/<id>), so the gateway
// serves one document for every page and links can be shared; the
// fragment never reaches the server, and carries no token.

export type Route =
  | { page: "login" }
  | { page: "runs"; project: string; filters: URLSearchParams }
  | { page: "run"; project: string; run: string; step?: string; item?: number }
  | { page: "pipelines"; project: string }
  | { page: "pipeline"; project: string; pipeline: string; version?: number }
  /** The form that starts a run of a version; from: prefill from that run's params. */
  | { page: "launch"; project: string; pipeline: string; version: number; from?: string }
  /** Runs side by side (2 to 20, in this order). */
  | { page: "compare"; project: string; runs: string[] }
  /** The project's schedules; focus: the one to scroll to (a run's page links there). */
  | { page: "schedules"; project: string; focus?: string }
  | { page: "endpoints"; project: string }
  /** The model registry: the project's models; one model with its versions, aliases, endpoints and alias history. */
  | { page: "models"; project: string }
  | { page: "model"; project: string; model: string }
  | { page: "endpoint"; project: string; endpoint: string }
  /** Clusters, GPUs, quotas; one cluster with its admission queue. */
  | { page: "clusters"; project: string }
  | { page: "cluster"; project: string; cluster: string }
  /** The step cache's entries, filtered by pipeline and step. */
  | { page: "cache"; project: string; filters: URLSearchParams }
  | { page: "webhooks"; project: string }
  | { page: "webhook"; project: string; webhook: string }
  /** The project's triggers; one trigger with its firing log. */
  | { page: "triggers"; project: string }
  | { page: "trigger"; project: string; trigger: string }
  /** The project's secrets: names, versions, who wrote them last (never a value). */
  | { page: "secrets"; project: string }
  | { page: "home" };

export function parse(hash: string): Route {
  const [path, q = ""] = hash.replace(/^#/, "").split("?", 2);
  const seg = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(q);
  if (seg[0] === "login") return { page: "login" };
  if (seg[0] === "p" && seg[1]) {
    const project = seg[1];
    if (seg[2] === "runs" && seg[3]) {
      const item = params.get("item");
      return { page: "run", project, run: seg[3], step: seg[4] === "steps" ? seg[5] : undefined, item: item !== null && /^\d+$/.test(item) ? Number(item) : undefined };
    }
    if (seg[2] === "runs") return { page: "runs", project, filters: params };
    if (seg[2] === "pipelines" && seg[3]) {
      const v = seg[4] === "versions" && /^\d+$/.test(seg[5] ?? "") ? Number(seg[5]) : undefined;
      if (v && seg[6] === "run") return { page: "launch", project, pipeline: seg[3], version: v, from: params.get("from") || undefined };
      return { page: "pipeline", project, pipeline: seg[3], version: v };
    }
    if (seg[2] === "pipelines") return { page: "pipelines", project };
    if (seg[2] === "compare") return { page: "compare", project, runs: params.getAll("runs").filter(Boolean) };
    if (seg[2] === "schedules") return { page: "schedules", project, focus: params.get("name") || undefined };
    if (seg[2] === "endpoints" && seg[3]) return { page: "endpoint", project, endpoint: seg[3] };
    if (seg[2] === "endpoints") return { page: "endpoints", project };
    if (seg[2] === "models") return seg[3] ? { page: "model", project, model: seg[3] } : { page: "models", project };
    if (seg[2] === "clusters") return seg[3] ? { page: "cluster", project, cluster: seg[3] } : { page: "clusters", project };
    if (seg[2] === "cache") return { page: "cache", project, filters: params };
    if (seg[2] === "webhooks") return seg[3] ? { page: "webhook", project, webhook: seg[3] } : { page: "webhooks", project };
    if (seg[2] === "triggers") return seg[3] ? { page: "trigger", project, trigger: seg[3] } : { page: "triggers", project };
    if (seg[2] === "secrets") return { page: "secrets", project };
    return { page: "runs", project, filters: params };
  }
  return { page: "home" };
}

const e = encodeURIComponent;

export const href = {
  runs: (project: string, filters?: Record<string, string>) => {
    const q = new URLSearchParams(Object.entries(filters ?? {}).filter(([, v]) => v)).toString();
    return `#/p/${e(project)}/runs${q ? `?${q}` : ""}`;
  },
  run: (project: string, run: string, step?: string, item?: number) =>
    `#/p/${e(project)}/runs/${e(run)}${step ? `/steps/${e(step)}` : ""}${step && item !== undefined ? `?item=${item}` : ""}`,
  pipelines: (project: string) => `#/p/${e(project)}/pipelines`,
  pipeline: (project: string, pipeline: string, version?: number) => `#/p/${e(project)}/pipelines/${e(pipeline)}${version ? `/versions/${version}` : ""}`,
  launch: (project: string, pipeline: string, version: number, from?: string) =>
    `#/p/${e(project)}/pipelines/${e(pipeline)}/versions/${version}/run${from ? `?from=${e(from)}` : ""}`,
  schedules: (project: string, focus?: string) => `#/p/${e(project)}/schedules${focus ? `?name=${e(focus)}` : ""}`,
  endpoints: (project: string) => `#/p/${e(project)}/endpoints`,
  endpoint: (project: string, endpoint: string) => `#/p/${e(project)}/endpoints/${e(endpoint)}`,
  models: (project: string, model?: string) => `#/p/${e(project)}/models${model ? `/${e(model)}` : ""}`,
  clusters: (project: string, cluster?: string) => `#/p/${e(project)}/clusters${cluster ? `/${e(cluster)}` : ""}`,
  cache: (project: string, filters?: Record<string, string>) => {
    const q = new URLSearchParams(Object.entries(filters ?? {}).filter(([, v]) => v)).toString();
    return `#/p/${e(project)}/cache${q ? `?${q}` : ""}`;
  },
  webhooks: (project: string, webhook?: string) => `#/p/${e(project)}/webhooks${webhook ? `/${e(webhook)}` : ""}`,
  triggers: (project: string, trigger?: string) => `#/p/${e(project)}/triggers${trigger ? `/${e(trigger)}` : ""}`,
  secrets: (project: string) => `#/p/${e(project)}/secrets`,
  compare: (project: string, runs: string[]) => `#/p/${e(project)}/compare${runs.length ? `?${runs.map((r) => `runs=${e(r)}`).join("&")}` : ""}`,
};
