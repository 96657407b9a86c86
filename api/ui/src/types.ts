// The REST types the UI reads: a hand-kept subset of api/openapi.yaml's
// schemas (the names match), enough for the pages. Fields the UI does not
// show are left out.

export type RunState = "PENDING" | "RUNNING" | "SUCCEEDED" | "FAILED" | "CANCELLING" | "CANCELLED" | "TERMINATED";

export type StepState =
  | "PENDING"
  | "RUNNING"
  | "RETRYING"
  | "SUCCEEDED"
  | "FAILED"
  | "SKIPPED"
  | "CANCELLED"
  | "CACHED"
  | "WAITING_FOR_GPU"
  | "WAITING_FOR_APPROVAL";

export const RUN_STATES: RunState[] = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLING", "CANCELLED", "TERMINATED"];

export function runTerminal(s: RunState): boolean {
  return s === "SUCCEEDED" || s === "FAILED" || s === "CANCELLED" || s === "TERMINATED";
}

export function stepTerminal(s: StepState): boolean {
  return s === "SUCCEEDED" || s === "FAILED" || s === "SKIPPED" || s === "CANCELLED" || s === "CACHED";
}

export interface Attempt {
  number: number;
  state: StepState;
  startedAt?: string;
  finishedAt?: string;
  exitCode?: number;
  error?: string;
  logUrl?: string;
  cluster?: string;
  object?: string;
  links?: Record<string, string>;
  message?: string;
  execution?: number;
}

export interface ApprovalStatus {
  message?: string;
  roles: string[];
  commentRequired?: boolean;
  deadline?: string;
  onTimeout?: string;
  decision?: "approved" | "rejected";
  approver?: string;
  approverRole?: string;
  comment?: string;
  decidedAt?: string;
  timedOut?: boolean;
}

export interface StepStatus {
  name: string;
  kind: string;
  state: StepState;
  startedAt?: string;
  finishedAt?: string;
  attempts?: Attempt[];
  outputs?: unknown;
  error?: string;
  message?: string;
  item?: unknown;
  items?: StepStatus[];
  approval?: ApprovalStatus;
  /** What the step (or item) wrote; a CACHED step's are its source's. */
  artifacts?: Artifact[];
  /** What it read, by input name (`from` is the producer's `<step>.<artifact>`). */
  inputs?: Artifact[];
  /** What it reported in `$ATELIER_METRICS`. */
  metrics?: StepMetrics;
}

/** StepMetrics is what a step reported: numbers, and short curves (a loss per epoch). */
export interface StepMetrics {
  scalars?: Record<string, number>;
  series?: Record<string, number[]>;
}

export type ArtifactType = "file" | "dataset" | "model" | "metrics";

export interface ArtifactProducer {
  run: string;
  step: string;
  item?: number;
  attempt: number;
}

/** Artifact is a stored file or directory: a reference, never the bytes. */
export interface Artifact {
  id: string;
  name: string;
  from?: string;
  type: ArtifactType | string;
  digest: string;
  size: number;
  /** A directory's file count; absent for a file. */
  files?: number;
  producer: ArtifactProducer;
  createdAt?: string;
}

export interface ArtifactUse {
  run: string;
  step: string;
  item?: number;
  input: string;
  at: string;
}

export interface ConsumedArtifact {
  use: ArtifactUse;
  artifact: Artifact;
}

export interface RunArtifacts {
  produced: Artifact[];
  consumed: ConsumedArtifact[];
}

export interface ArtifactLineage {
  artifact: Artifact;
  madeFrom: ConsumedArtifact[];
  consumers: ArtifactUse[];
}

export interface ArtifactFile {
  /** Slash-separated, relative to the directory; empty for a file artifact. */
  path: string;
  digest: string;
  size: number;
  executable?: boolean;
}

export interface ArtifactFileList {
  files: ArtifactFile[];
}

export interface CancelRequest {
  reason: string;
  requester: string;
  at: string;
}

export interface RunStatus {
  runId: string;
  project: string;
  pipeline?: string;
  version?: number;
  workflow: string;
  state: RunState;
  seq: number;
  startedAt?: string;
  finishedAt?: string;
  error?: string;
  cancel?: CancelRequest;
  params?: Record<string, unknown>;
  steps: StepStatus[];
  result?: unknown;
  warnings?: string[];
  scheduleId?: string;
  retryOf?: string;
  cacheBypass?: boolean;
  /** the steps a run of a subset was started for (with what they need). */
  targets?: string[];
}

/** RunEvent is the data of an SSE `run` event: RunStatus without steps. */
export type RunEvent = Omit<RunStatus, "steps" | "params" | "result" | "warnings" | "scheduleId" | "retryOf" | "targets">;

export interface Run {
  id: string;
  project: string;
  pipeline?: string;
  version?: number;
  workflow: string;
  state: RunState;
  createdAt: string;
  updatedAt: string;
  createdBy?: string;
  status?: RunStatus;
  links: { self: string; events: string; temporalUI?: string };
  /** The run's value of the listing's metric (GET …/runs?metric=…). */
  metricValue?: number;
}

export interface RunList {
  runs: Run[];
  nextPageToken?: string;
}

/** ComparedRun is a run of a comparison (GET …/compare), a column of its table. */
export interface ComparedRun {
  id: string;
  pipeline?: string;
  version?: number;
  workflow: string;
  state: RunState;
  createdAt: string;
  createdBy?: string;
}

/** ComparedValue is a param (or a step's output): a JSON value per run, null where a run has none. */
export interface ComparedValue {
  /** The step (outputs only). */
  step?: string;
  name: string;
  values: unknown[];
  differs: boolean;
}

/** ComparedMetric is a step's scalar metric; best is the index of the highest value, worst of the lowest. */
export interface ComparedMetric {
  step: string;
  name: string;
  values: (number | null)[];
  differs: boolean;
  best?: number;
  worst?: number;
}

export interface ComparedSeries {
  step: string;
  name: string;
  values: (number[] | null)[];
}

/** RunComparison puts runs side by side: every `values` has one entry per run, in the order of `runs`. */
export interface RunComparison {
  runs: ComparedRun[];
  params: ComparedValue[];
  outputs: ComparedValue[];
  metrics: ComparedMetric[];
  series: ComparedSeries[];
}

export interface Project {
  name: string;
  description?: string;
}

/** A token's role: viewer reads, editor also changes its project, admin everything. */
export type Role = "admin" | "editor" | "viewer";

/** Token is a token as the gateway shows it (GET /v1/whoami): never its secret. */
export interface Token {
  id: string;
  name: string;
  role: Role;
  /** Absent for admin tokens (every project). */
  project?: string;
  createdAt: string;
  expiresAt?: string;
}

export interface Pipeline {
  project: string;
  name: string;
  latestVersion: number;
  createdAt: string;
  updatedAt: string;
}

export interface PipelineGraphStep {
  name: string;
  kind: string;
  dependsOn: string[];
  forEach?: boolean;
  runIf?: string;
  continueOn?: string;
  when?: string;
}

/** The declared type of a pipeline param (pipeline.ParamType). */
export type ParamType = "string" | "integer" | "number" | "boolean" | "object" | "array";

/** PipelineParam is one of a spec's `params`: a param without a default is required. */
export interface PipelineParam {
  name: string;
  type: ParamType;
  default?: unknown;
  description?: string;
}

/** PipelineSpec is the part of a version's spec the UI reads (the rest is shown as JSON). */
export interface PipelineSpec {
  name?: string;
  description?: string;
  params?: PipelineParam[];
  [field: string]: unknown;
}

export interface PipelineVersion {
  project: string;
  pipeline: string;
  version: number;
  spec: PipelineSpec;
  digest: string;
  createdAt: string;
  createdBy?: string;
  graph?: { steps: PipelineGraphStep[] };
}

/** CreateRunRequest starts a run of a declarative pipeline (the UI starts no Go workflow). */
export interface CreateRunRequest {
  pipeline: string;
  /** 0 or absent: the newest. */
  version?: number;
  /** Checked against the version's params; defaults fill the others. */
  params?: Record<string, unknown>;
  cache?: { bypass?: boolean };
}

export interface FieldError {
  /** e.g. `params.lr`, `body`. */
  path: string;
  message: string;
}

export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  instance?: string;
  errors?: FieldError[];
}

// ---- schedules (GET/POST …/schedules) ----

/** What a start does while the schedule's previous run still runs. */
export type ScheduleOverlap = "skip" | "bufferOne" | "bufferAll" | "cancelOther" | "terminateOther" | "allowAll";

/** ScheduledRun is a run the schedule started: its ID, and when it was due and started. */
export interface ScheduledRun {
  runId: string;
  scheduledAt: string;
  startedAt: string;
}

/** Schedule is a Temporal Schedule of runs: of a pipeline version (pipeline, version, params) or of a Go pipeline (workflow, input). */
export interface Schedule {
  project: string;
  name: string;
  pipeline?: string;
  version?: number;
  params?: Record<string, unknown>;
  workflow?: string;
  input?: unknown;
  cron?: string[];
  every?: string[];
  timeZone?: string;
  jitter?: string;
  overlap: ScheduleOverlap;
  catchupWindow?: string;
  paused: boolean;
  note?: string;
  /** Runs started so far. */
  actions: number;
  /** Starts skipped because the previous run was still running. */
  skippedOverlap: number;
  nextRuns: string[];
  recentRuns: ScheduledRun[];
  createdAt?: string;
  createdBy?: string;
}

export interface ScheduleList {
  items: Schedule[];
}

export interface ScheduleNote {
  note?: string;
}

/** ScheduleBackfillRequest is the half-open range [start, end) (RFC 3339). */
export interface ScheduleBackfillRequest {
  start: string;
  end: string;
}

// ---- inference endpoints (GET/POST …/endpoints) ----

export interface EndpointSummary {
  name: string;
  project: string;
  createdAt?: string;
}

export interface EndpointList {
  items: EndpointSummary[];
}

export interface RevisionWeight {
  revision: number;
  weight: number;
}

export interface RevisionReplicas {
  revision: number;
  replicas: number;
}

export interface EndpointRevision {
  number: number;
  digest: string;
  createdAt: string;
  rollbackOf?: number;
}

/** EndpointRollout is the rollout in progress: its candidate, where it is (stage) and what its last step decided (action, reason, failed gate). */
export interface EndpointRollout {
  revision: number;
  strategy: string;
  stage: string;
  action: string;
  reason?: string;
  failedGate?: string;
}

/** EndpointScale is the autoscaler's last decision. */
export interface EndpointScale {
  desired: number;
  reason: string;
  message: string;
  metricsUnknown?: boolean;
}

/** EndpointObserved is what the runtime reported of a revision's replicas. */
export interface EndpointObserved {
  revision: number;
  replicas: number;
  ready: number;
  crashLooping?: number;
  waiting?: string;
}

export interface EndpointEvent {
  at: string;
  kind: string;
  revision?: number;
  message: string;
}

/** EndpointTrafficWindow is the candidate's requests through the gateway since the current step started measuring (what its traffic gates judge). */
export interface EndpointTrafficWindow {
  revision: number;
  from: string;
  requests: number;
  errors: number;
  p99LatencyMs?: number;
}

export interface EndpointQuota {
  fits: boolean;
  message: string;
}

/** EndpointGates are a spec's rollout.gates (with defaults filled in by the gateway). */
export interface EndpointGates {
  maxErrorRate?: number;
  maxP99LatencyMs?: number;
  minSamples?: number;
  analysisInterval?: string;
  maxInsufficient?: string;
  onInsufficient?: string;
  syntheticProbes?: boolean;
}

/**
 * EndpointModel is a spec's model: a name or URI, or a reference into the
 * model registry (ref: "<model>@<alias>", "<model>@<version>", "<model>"),
 * which the gateway resolves per revision into registered.
 */
export interface EndpointModel {
  name?: string;
  uri?: string;
  ref?: string;
  /** Moving the alias ref names rolls out the version it then names. */
  follow?: boolean;
  /** The exact version this revision serves (set by Atelier, never by the user). */
  registered?: RegisteredModel;
}

export interface RegisteredModel {
  model: string;
  version: number;
  /** The alias ref named; absent when it named a version. */
  alias?: string;
  artifactId: string;
  digest: string;
  size: number;
  files?: number;
  run?: string;
  step?: string;
}

/** EndpointSpec is the part of a spec (inference.EndpointSpec) the UI reads; the rest is shown as JSON. */
export interface EndpointSpec {
  backend?: string;
  model?: EndpointModel;
  image?: string;
  resources?: { gpuType?: string; gpus?: number; cpu?: string; memory?: string };
  replicas?: { min?: number; max?: number };
  rollout?: {
    strategy?: string;
    maxSurge?: number;
    maxUnavailable?: number;
    surgeFree?: boolean;
    canary?: { steps?: { weight: number; pause?: string }[] };
    blueGreen?: { autoPromoteAfter?: string };
    gates?: EndpointGates;
  };
  [field: string]: unknown;
}

/** Endpoint is an endpoint as its workflow sees it now (GET …/endpoints/{e}). */
export interface Endpoint {
  project: string;
  name: string;
  /** The latest revision. */
  current: number;
  /** The revision whose replicas serve (0: none yet). */
  stable: number;
  /** The current revision's spec, defaults filled in. */
  spec: EndpointSpec;
  revisions: EndpointRevision[];
  replicas: RevisionReplicas[];
  traffic: RevisionWeight[];
  trafficMode?: string;
  rollout?: EndpointRollout;
  scale?: EndpointScale;
  observed: EndpointObserved[];
  events: EndpointEvent[];
  deleting: boolean;
  temporalUI?: string;
  held?: number;
  window?: EndpointTrafficWindow;
  quota?: EndpointQuota;
}

export interface EndpointRollback {
  revision: number;
}

// ---- the model registry (GET/POST …/models) ----

/** Model is a registered model, with its aliases (in lists too). */
export interface Model {
  name: string;
  description: string;
  /** The newest version (0 before the first). */
  latest: number;
  createdAt: string;
  createdBy: string;
  /** Alias to version. */
  aliases: Record<string, number>;
}

export interface ModelList {
  items: Model[];
}

/** ModelCreate is POST …/models: a model without versions. */
export interface ModelCreate {
  name: string;
  description?: string;
}

/** ModelVersion is one numbered, immutable version: an artifact, with the run that made it. */
export interface ModelVersion {
  model: string;
  version: number;
  artifact: Artifact;
  /** A serving hint (vllm, triton, ...); may be empty. */
  format: string;
  metadata: Record<string, unknown>;
  createdAt: string;
  /** The token's name, or "run <id>" for a pipeline's registration. */
  createdBy: string;
  aliases: string[];
}

export interface ModelVersionList {
  /** Newest first. */
  items: ModelVersion[];
}

/** ModelVersionCreate is POST …/models/{m}/versions: one of the project's artifacts (by ID) as the next version. */
export interface ModelVersionCreate {
  artifact: string;
  /** A serving hint (vllm, triton, ...). */
  format?: string;
  metadata?: Record<string, unknown>;
}

export interface ModelAliasUpdate {
  version: number;
}

/** ModelServing is an endpoint revision serving a version of the model. */
export interface ModelServing {
  endpoint: string;
  revision: number;
  /** stable serves traffic; candidate is rolling out. */
  role: "stable" | "candidate";
  version: number;
  /** The spec's model.ref it was resolved from. */
  ref: string;
  follow: boolean;
  run?: string;
}

export interface ModelServingList {
  items: ModelServing[];
}

/** ModelAliasEvent is one move of an alias: from is absent when it was new, to when it was removed. */
export interface ModelAliasEvent {
  alias: string;
  from?: number;
  to?: number;
  actor: string;
  at: string;
}

export interface ModelAliasEventList {
  /** Newest first. */
  items: ModelAliasEvent[];
}

// Clusters and GPU admission (GET /v1/clusters, /v1/gpus, …/queue, …/gpu-policy).

/** ResourceAmount: allocatable, and what is left after the bound pods' requests. */
export interface ResourceAmount {
  total: number;
  free: number;
}

export interface GPUNode {
  name: string;
  gpuType?: string;
  gpuMemoryMiB?: number;
  gpus: number;
  /** Whole GPUs held by pods Atelier does not own. */
  gpusInUse: number;
  mig?: { profile: string; allocatable: number; inUse: number }[];
  taints?: { key: string; value?: string; effect: string }[];
  ready: boolean;
  unschedulable: boolean;
}

export interface ClusterCapacity {
  /** By GPU product (`unknown` without the label). */
  gpus: Record<string, ResourceAmount>;
  cpuMillis: ResourceAmount;
  memoryBytes: ResourceAmount;
  nodes: number;
  gpuNodes?: GPUNode[];
  /** Set when Kueue, not Atelier, admits the cluster's workloads. */
  kueueQueue?: string;
}

export interface Cluster {
  name: string;
  description?: string;
  labels: Record<string, string>;
  taskQueue: string;
  createdAt: string;
  updatedAt: string;
  lastSeenAt?: string;
  online: boolean;
  capacity?: ClusterCapacity;
}

export interface GPUAmount {
  resource: string;
  units: number;
}

/** QueueEntry is a workload of an admission queue; another project's has no workload, project, run, step, message or nodes. */
export interface QueueEntry {
  workload?: string;
  project?: string;
  run?: string;
  step?: string;
  submitted: string;
  gpus: GPUAmount[];
  position?: number;
  priority?: number;
  /** Quota, Capacity, NoNodeFits, NeverFits, Reservation, Preemption, Invalid. */
  reason?: string;
  message?: string;
  admitted?: string;
  nodes?: string[];
}

export interface AdmissionQueue {
  cluster: string;
  decidedAt?: string;
  pending: QueueEntry[];
  running: QueueEntry[];
}

export interface GPUTypeSummary {
  resource: string;
  memoryMiB?: number;
  clusters: string[];
  nodes: number;
  allocatable: number;
  /** Units held by pods Atelier does not own. */
  inUse: number;
}

export interface GPUQuota {
  resource: string;
  nominal: number;
  /** -1: no limit; absent: 0. */
  borrowingLimit?: number;
  lendingLimit?: number;
}

export interface GPUPolicy {
  project: string;
  cohort?: string;
  weight?: number;
  defaultPriority?: number;
  minPriority?: number;
  maxPriority?: number;
  quotas: GPUQuota[];
  updatedAt: string;
  warnings?: string[];
}

// The step cache (GET/DELETE …/cache).

export interface CacheEntry {
  key: string;
  pipeline: string;
  step: string;
  item?: number;
  runId: string;
  attempt: number;
  outputs: Record<string, unknown>;
  createdAt: string;
  expiresAt?: string;
  artifacts?: Artifact[];
}

export interface CacheEntryList {
  entries: CacheEntry[];
  nextPageToken?: string;
}

// Webhooks (…/webhooks; editor role).

export type WebhookEvent = "run.finished" | "step.failed" | "approval.requested";

/** Webhook never carries its secret. */
export interface Webhook {
  id: string;
  project: string;
  url: string;
  events: WebhookEvent[];
  pipeline?: string;
  description?: string;
  enabled: boolean;
  createdAt: string;
  updatedAt: string;
  createdBy?: string;
}

export interface WebhookAttempt {
  attempt: number;
  startedAt: string;
  durationMs: number;
  /** Absent when no response came. */
  statusCode?: number;
  error?: string;
}

export interface WebhookDelivery {
  id: string;
  runId: string;
  eventId: string;
  event: WebhookEvent;
  step?: string;
  state: "pending" | "succeeded" | "failed";
  attempts: number;
  nextAttemptAt?: string;
  lastStatusCode?: number;
  lastError?: string;
  createdAt: string;
  finishedAt?: string;
  log: WebhookAttempt[];
}

export interface WebhookDeliveryList {
  items: WebhookDelivery[];
  nextPageToken?: string;
}

// Secrets (…/secrets; viewers read the names, editors write; values are write-only).

/** Secret is a secret's metadata: no route ever returns its value. */
export interface Secret {
  project: string;
  name: string;
  /** 1 when created, +1 on every replacement. */
  version: number;
  createdAt: string;
  updatedAt: string;
  /** The token that last wrote it. */
  updatedBy: string;
}

export interface SecretList {
  items: Secret[];
}

/** SecretValue is PUT …/secrets/{name}'s body. */
export interface SecretValue {
  value: string;
}

/** SecretEvent is one line of the secrets audit (…/secret-events, editor role). */
export interface SecretEvent {
  name: string;
  action: "created" | "replaced" | "deleted" | "rewrapped";
  actor: string;
  at: string;
}

export interface SecretEventList {
  items: SecretEvent[];
}

// Triggers (…/triggers; viewers read, editors change).

/** TriggerOn is what fires a trigger: exactly one of the two. */
export interface TriggerOn {
  /** A run of pipeline ended in one of states (default SUCCEEDED). */
  runFinished?: { pipeline: string; states?: RunState[] };
  /** A signed POST to the trigger's hookUrl. */
  hook?: Record<string, never>;
}

/** Trigger never carries a hook's secret (only the create response does). */
export interface Trigger {
  id: string;
  project: string;
  name: string;
  on: TriggerOn;
  pipeline: string;
  /** Absent: the newest version when it fires. */
  version?: number;
  /** Strings may hold {{ upstream.… }} / {{ body.… }} references, read when it fires. */
  params: Record<string, unknown>;
  maxPerMinute: number;
  description?: string;
  enabled: boolean;
  /** A hook's inbound URL (a path when the gateway has no public URL). */
  hookUrl?: string;
  createdAt: string;
  createdBy?: string;
}

export interface TriggerCreate {
  name: string;
  on: TriggerOn;
  pipeline: string;
  version?: number;
  params?: Record<string, unknown>;
  maxPerMinute?: number;
  description?: string;
  enabled?: boolean;
}

export interface CreatedTrigger {
  trigger: Trigger;
  /** A hook's HMAC key: in this response only. */
  secret?: string;
}

export type TriggerFiringState = "pending" | "started" | "failed";

export interface TriggerFiring {
  id: string;
  /** The upstream run (a run trigger) or the hook delivery's ID. */
  source: string;
  state: TriggerFiringState;
  attempts: number;
  nextAttemptAt?: string;
  /** The run it started. */
  runId?: string;
  /** Why it did not start (yet). */
  error?: string;
  createdAt: string;
  finishedAt?: string;
}

export interface TriggerFiringList {
  items: TriggerFiring[];
  nextPageToken?: string;
}
