// Package inference is the domain logic of Atelier's inference serving:
// long-lived endpoints served by Triton or vLLM, their numbered revisions,
// the autoscaler that sizes them (down to zero) and the rollouts that
// replace one revision by another behind health gates. It decides; it does
// not act. The entity workflow that owns an endpoint (one per endpoint)
// feeds it observations and applies its answers through activities:
//
//	rev, made, err := inference.NextRevision(latest, spec, workflow.Now(ctx))
//	d := scaler.Decide(workflow.Now(ctx), observations, inference.Replicas{Current: n, Ready: ready})
//	step := rollout.Next(inference.RolloutInput{Now: workflow.Now(ctx), Target: d.Desired, Stable: s, Candidate: c})
//
// Nothing here does I/O, starts a goroutine, reads a clock (every time is
// an argument) or ranges over a map whose order could reach a result (maps
// serve lookups only; iteration is over slices, sorted where the input's
// order must not matter), so it can run in Temporal workflow code and
// passes workflowcheck with the project's configuration (which trusts
// encoding/json, used for digests). The Autoscaler and the Rollout are
// values with exported state that the workflow keeps and carries across
// continue-as-new; their decisions are the same after a JSON round trip
// (property-tested). There are no Temporal or Kubernetes imports.
//
// # Endpoints
//
// An EndpointSpec names a backend (triton or vllm), a model, an image,
// extra args and env, secrets by name, per-replica resources (GPUs of one
// type, counted like the gpu package's quotas; optional CPU and memory),
// Kubernetes pod settings (schema.Pod, on clusters only), replica bounds,
// autoscaling settings and rollout settings. Validate reports every
// problem at once, each with a JSON path ("rollout.canary.steps[1].weight")
// and a message saying what to change, as a *ValidationError (errors.Is
// ErrInvalidSpec); it checks the spec with defaults applied so that a
// default cannot hide a conflict it creates, e.g. a stable window shorter
// than the default panic window. The gateway decodes a spec strictly and
// reports unknown fields and values that do not decode together with
// Validate's problems (validating the rest as if they were absent), so a
// typo is one problem among the others. Rules worth knowing: triton needs
// model.uri (the repository) or model.ref, and model.name; vllm needs one
// of model.uri, model.name and model.ref; model.ref (a registry version,
// "<model>@<alias|version>") excludes model.uri, model.follow needs it to
// name an alias, and model.registered is set by Atelier, never by users
// (see Model);
// replicas.min 0 means scale to zero and needs autoscaling.idleTimeout;
// args may not set flags Atelier relies on (BackendInfo.Reserved: ports,
// model control, the model itself); surgeFree excludes blueGreen and any
// maxSurge, and needs maxUnavailable ≥ 1; maxSurge and maxUnavailable are
// not both 0; canary weights increase strictly within 1..100.
//
// WithDefaults fills every unset field and changes nothing that is set:
//
//	replicas.min                1 (a pointer: an explicit 0 is scale to zero)
//	replicas.max                max(min, 1)
//	targetQueuePerReplica       triton 4, vllm 32 (BackendInfo.DefaultTarget)
//	stableWindow                60s
//	panicWindow                 stableWindow / 10, at least 1s
//	panicThreshold              2 (the short window asks for 2 × the ready replicas)
//	scaleDownDelay              5m when absent (a GPU replica takes minutes to load again); "0s" turns it off
//	idleTimeout                 none (no scale to zero)
//	rollout.strategy            rolling
//	maxSurge / maxUnavailable   1 / 0; surgeFree: 0 / 1
//	canary.steps                10% for 5m, 50% for 5m (strategy canary only)
//	gates.maxErrorRate          0.01 (1 disables the gate)
//	gates.maxP99LatencyMs       none (0 disables the gate)
//	gates.minSamples            50 requests
//	gates.analysisInterval      30s
//	gates.maxInsufficient       10m, then gates.onInsufficient: pause
//	gates.syntheticProbes       off
//	startupDeadlines            scheduled 10m, imagePulled 20m, engineReady 30m
//
// # Revisions
//
// A Revision is immutable and numbered from 1. It stores the spec with
// defaults applied (rolling back restores what ran, whatever later
// versions default to), Digest, the sha256 of that spec's canonical JSON
// (struct fields in declaration order, maps by sorted key; optional fields
// are omitted when empty, so adding one keeps old digests), and
// TemplateDigest over what replicas run (backend, model, image, args, env,
// secrets, resources, pod settings).
// NextRevision validates an update and returns the latest revision
// unchanged (made = false) when the digest is the same: writing a default
// out explicitly is not a change. A revision that differs only in
// replicas, autoscaling or rollout settings has the same TemplateDigest:
// NeedsRollout is false and the workflow applies it in place. Rollback(N)
// makes a new revision with revision N's spec and RollbackOf = N (a no-op
// when the latest already has that spec).
//
// # Backends
//
// Info holds each backend's facts as data. Triton: HTTP 8000, gRPC 8001,
// metrics 8002, ready at /v2/health/ready (with Triton's default strict
// readiness, only once the loaded model is ready), queue gauge
// nv_inference_pending_request_count, args --model-repository=<uri>
// --model-control-mode=explicit --load-model=<name> (explicit control loads
// only that model). vLLM: HTTP and metrics on 8000; /health answers before
// the weights are loaded, so readiness is /v1/models listing the served
// model (ModelListed reads the body); gauges vllm:num_requests_waiting and
// vllm:num_requests_running, KV-cache usage from vllm:kv_cache_usage_perc
// (or the older vllm:gpu_cache_usage_perc); args --model <uri or name>
// [--served-model-name <name>] --port 8000. ContainerArgs appends the
// user's args to these. Signal turns one replica's scrape into a
// QueueSignal: series of a metric are summed (in sorted order, so float
// sums do not depend on the scrape's order), NaN and negative values are
// absent, and Known is false unless the waiting gauge and, when the
// backend has one, the running gauge were present. A replica's load is
// Waiting + Running: waiting alone falls to zero exactly when capacity is
// right, which would make the autoscaler oscillate. Triton exports no
// running gauge, so its load is its pending count and its default target
// is small.
//
// # Autoscaler
//
// Autoscaler.Decide(now, observations, current) follows Knative's pod
// autoscaler, with changes for GPUs; it is meant to be called at a steady
// cadence (every few seconds), each call being one data point.
//
//  1. Measure. For each replica, the newest observation younger than
//     SampleMaxAge (10s) counts (ties: the higher load, then an unknown
//     one, so duplicates change nothing). A known SourceAggregate
//     observation replaces the per-replica sum. Ready replicas without a
//     fresh known sample are Missing: their load is estimated as the mean
//     of the others (Knative's extrapolation), and the decision is
//     incomplete; with no known sample at all there is no data point.
//     Requests held at the activating proxy (SourceProxy) add to the load.
//     At zero replicas the proxy is the only witness of demand, so without
//     its observation there is no data point either.
//  2. Average. The loads of the last StableWindow and PanicWindow are
//     averaged per data point; each asks for ⌈average / target⌉ replicas.
//     Without any data point in the stable window, the count stays where
//     it is (MetricsUnknown).
//  3. Panic. When the panic window asks for at least PanicThreshold × the
//     ready replicas (at least 1), panic starts or is extended; it ends a
//     StableWindow after the last such burst. In panic the decision is the
//     highest of the stable figure, the panic figure, the highest figure of
//     this panic and the current count: never a scale-down. (Knative uses
//     the panic figure alone; keeping the stable one makes decisions
//     monotone in load.)
//  4. Missing metrics freeze. An incomplete decision never goes below the
//     current count: missing is never zero.
//  5. Scale-down delay. The decision is the highest figure of the last
//     ScaleDownDelay (figures recorded after step 4).
//  6. Bounds. The result is clamped to [MinReplicas, MaxReplicas]. With
//     MinReplicas 0, one replica stays until demand has been known to be
//     zero for IdleTimeout (any load, or any incomplete decision, restarts
//     that clock); then zero. An endpoint at zero stays there until demand
//     is seen, and held requests at the proxy always wake it (0→1, or more
//     when the burst panics).
//
// Decision carries the count, the Reason that settled it (Stable, Panic,
// ScaleDownDelay, MetricsUnknown, MinReplicas, MaxReplicas, AwaitingIdle,
// ScaleToZero, Activation), whether it panicked, whether metrics were
// missing, and the figures used; Message renders them. The state keeps
// the points of the windows only, at most 4,096 of each. Property tests
// check: the count stays within bounds (zero only when scale to zero is
// allowed and idle), no scale-down in panic or with missing metrics, held
// requests wake an endpoint, more load never asks for fewer replicas, and
// the order of the observations does not matter.
//
// # Rollouts
//
// A Rollout (NewRollout(stable, candidate), the candidate's settings)
// answers each RolloutInput (time, the target replica count from the
// autoscaler, the observed status of both revisions, an optional
// Promote or Abort) with a Step: replicas per revision, traffic weights
// per revision (summing to 100), when to call again, the start of the
// traffic window to measure, probes to send, the gate verdicts, and an
// Action: Progress, Paused (awaiting Promote), Promote, RollBack (with
// the failed gate), then Done for every later call. A target below 1
// counts as 1: a revision is judged on a running replica. Apply a step by
// scaling up, shifting traffic, then scaling down; with ScaleDownFirst
// (surge-free) shift, scale down, and let new replicas wait for the
// freed GPUs. A revision without replicas gets no traffic.
//
// Each call checks, in order: Abort rolls back; a hard gate that fails
// rolls back at once; while the candidate's traffic is measured, a
// traffic gate that fails with enough samples rolls back at once (even
// during a pause); then the stage decides:
//
//   - First revision (no stable one): all replicas at 100%; promoted when
//     ready; only the hard gates apply.
//   - Rolling: Kubernetes Deployment batches: the candidate grows while the
//     total stays within target + maxSurge, the stable revision shrinks,
//     unready replicas first, while the ready total stays at least target −
//     maxUnavailable. Traffic follows the ready replicas that stay. When
//     every replica is new and ready, the gates judge the traffic measured
//     since the candidate's first request.
//   - Canary: per step, start ⌈weight × target⌉ candidate replicas (at least
//     one; taken from the stable revision when surge-free, added otherwise)
//     at the previous weight; once they are ready, shift to the step's
//     weight, open a new traffic window, pause, then let the gates decide
//     the step. After the last step, the remaining replicas are replaced in
//     rolling batches, traffic never below the last weight, then promoted.
//     The candidate's weight never goes back.
//   - Blue-green: a full preview beside the stable revision at 0%; once
//     ready, a traffic window opens (synthetic probes are its only traffic),
//     then it waits for Promote, or with autoPromoteAfter promotes itself
//     after that long with passing gates; then all traffic switches.
//
// Promote skips the current pause and any wait for samples (never
// readiness; failing gates still roll back), resumes a paused rollout and
// promotes a preview; sent early, it is kept for the next pause. A
// rollback returns the target to the stable revision and all traffic at
// once (a failing candidate is worse than a short lack of capacity); after
// a failed first revision, nothing serves.
//
// # Gates
//
// HealthGates (hard): Readiness fails when a candidate replica missed a
// startup phase deadline, or when fewer replicas than requested have been
// ready for longer than the three budgets together (a backstop for callers
// without per-replica phases; a scale-up restarts it); it is Pending
// while replicas start in time. CrashLoop fails on one crash-looping
// replica. TrafficGates: ErrorRate (errors / requests above maxErrorRate)
// and Latency (p99 above maxP99LatencyMs) need minSamples requests in the
// window: with fewer, with unknown metrics or with a NaN p99, the verdict
// is InsufficientSamples, never a pass and never a failure. When a verdict
// is due and samples are short, the step asks for the missing number of
// probe requests (syntheticProbes; a fresh window asks for minSamples) and
// waits; after maxInsufficient from when the lack was first seen, the
// rollout pauses or rolls back (onInsufficient). Gates are evaluated every
// analysisInterval while measuring (Step.WaitUntil says when).
//
// CheckStartup tracks each replica's phases (Scheduled from creation,
// ImagePulled from scheduling, EngineReady from the pull), each against
// its own budget, and returns the overdue replicas (a phase reached late
// counts) and the next deadline, for a durable timer per phase instead of
// one fixed deadline.
//
// # Quota pre-check
//
// CheckQuota(stable, candidate, target, headroom) walks the plan's layouts
// before the rollout starts, counting what both revisions hold: the fixed
// stages' layouts and the corners of each rolling phase's reachable region,
// so the bound holds however slowly replicas become ready. Against the
// project's GPU headroom per type, it reports the peak replicas, the extra
// GPUs per type and the shortfall, and when the plan does not fit, the first
// plan that does: the same strategy with a smaller maxSurge, the same
// strategy surge-free, or a surge-free rolling rollout (a new GPU type
// needs the whole target of it even then). Property tests check that
// rollouts never request more than this peak.
package inference
