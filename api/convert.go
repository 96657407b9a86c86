package api

import (
	"encoding/json"
	"math"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// This file is the one place where internal types (catalogue rows,
// workflow status) become REST types (api/gen, generated from
// openapi.yaml). Internal structs serve other contracts too (RunStatus is
// also the workflow's query result, the mirror's argument and the JSON in
// Postgres), so they never go to clients directly: a field added to them
// reaches the API only when it is converted here and declared in the spec.
// convert_test.go pins the JSON of every conversion to golden files and
// fails when a fixture leaves a field of an internal struct unset.
//
// Optional REST fields are pointers; the internal types' omitempty
// behaviour is reproduced by leaving them nil for zero values (opt, optSlice,
// optMap), so the JSON on the wire is unchanged.

func projectView(p catalog.Project) gen.Project {
	return gen.Project{Name: p.Name, Description: opt(p.Description), CreatedAt: p.CreatedAt}
}

func projectViews(ps []catalog.Project) []gen.Project { return views(ps, projectView) }

func tokenView(t catalog.Token) gen.Token {
	return gen.Token{
		Id: t.ID, Name: t.Name, Project: opt(t.Project), Role: gen.Role(t.Role),
		CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt,
	}
}

func pipelineVersionView(v catalog.PipelineVersion) gen.PipelineVersion {
	return gen.PipelineVersion{
		Project: v.Project, Pipeline: v.Pipeline, Version: v.Version, Spec: gen.PipelineSpec(v.Spec),
		Digest: v.Digest, CreatedAt: v.CreatedAt, CreatedBy: opt(v.CreatedBy),
		Graph: pipelineGraph(v.Spec),
	}
}

// pipelineGraph is the DAG of a stored spec as the workflow schedules it
// (spec.Dependencies: dependsOn plus implicit references), so clients such
// as the web UI draw the edges the engine honours without re-implementing
// expression analysis. Stored specs always parse; nil if one did not.
func pipelineGraph(raw json.RawMessage) *gen.PipelineGraph {
	p, err := pipeline.Parse(raw)
	if err != nil {
		return nil
	}
	deps := pipeline.Dependencies(p)
	g := &gen.PipelineGraph{Steps: make([]gen.PipelineGraphStep, len(p.Steps))}
	for i, st := range p.Steps {
		kind := st.Kind
		if kind == "" {
			kind = pipeline.KindContainer
		}
		names := make([]string, len(deps[i]))
		for k, j := range deps[i] {
			names[k] = p.Steps[j].Name
		}
		g.Steps[i] = gen.PipelineGraphStep{
			Name: st.Name, Kind: string(kind), DependsOn: names,
			ForEach: opt(st.ForEach != nil), RunIf: opt(string(st.RunIf)), When: opt(st.When),
			ContinueOn: opt(string(st.ContinueOn)),
		}
	}
	return g
}

func pipelineView(p catalog.Pipeline) gen.Pipeline {
	return gen.Pipeline{
		Project: p.Project, Name: p.Name, LatestVersion: p.LatestVersion,
		CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}
}

func pipelineViews(ps []catalog.Pipeline) []gen.Pipeline { return views(ps, pipelineView) }

func goWorkflowViews(ws []catalog.GoWorkflow) []gen.GoWorkflow {
	return views(ws, func(w catalog.GoWorkflow) gen.GoWorkflow {
		return gen.GoWorkflow{Name: w.Name, Description: opt(w.Description), TaskQueue: w.TaskQueue, UpdatedAt: w.UpdatedAt}
	})
}

// clusterView adds what the registry does not store: whether the worker is
// online, judged by the gateway's clock.
func (s *server) clusterView(cl catalog.Cluster) gen.Cluster {
	labels := cl.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	return gen.Cluster{
		Name:        cl.Name,
		Description: opt(cl.Description),
		Labels:      labels,
		TaskQueue:   cl.TaskQueue,
		CreatedAt:   cl.CreatedAt,
		UpdatedAt:   cl.UpdatedAt,
		LastSeenAt:  cl.LastSeenAt,
		Online:      cl.Online(s.now()),
		Capacity:    capacityView(cl.Capacity),
	}
}

func capacityView(c *catalog.ClusterCapacity) *gen.ClusterCapacity {
	if c == nil {
		return nil
	}
	var gpus map[string]gen.ResourceAmount // nil stays null, as before
	if c.GPUs != nil {
		gpus = make(map[string]gen.ResourceAmount, len(c.GPUs))
		for k, a := range c.GPUs {
			gpus[k] = amountView(a)
		}
	}
	v := &gen.ClusterCapacity{
		Gpus: gpus, CpuMillis: amountView(c.CPUMillis), MemoryBytes: amountView(c.MemoryBytes), Nodes: c.Nodes,
	}
	v.GpuNodes = optSlice(views(c.GPUNodes, gpuNodeView))
	v.KueueQueue = opt(c.KueueQueue)
	return v
}

func gpuNodeView(n gpu.Node) gen.GPUNode {
	v := gen.GPUNode{Name: n.Name, Gpus: n.GPUs, GpusInUse: n.GPUsInUse, Ready: n.Ready, Unschedulable: n.Unschedulable,
		GpuType: opt(string(n.GPUType))}
	v.GpuMemoryMiB = opt(n.GPUMemoryMiB)
	v.Mig = optSlice(views(n.MIG, func(m gpu.MIGSlices) gen.MIGSlices {
		return gen.MIGSlices{Profile: string(m.Profile), Allocatable: m.Allocatable, InUse: m.InUse}
	}))
	v.Taints = optSlice(views(n.Taints, func(t gpu.Taint) gen.NodeTaint {
		return gen.NodeTaint{Key: t.Key, Value: opt(t.Value), Effect: string(t.Effect)}
	}))
	return v
}

func amountView(a catalog.ResourceAmount) gen.ResourceAmount {
	return gen.ResourceAmount{Total: a.Total, Free: a.Free}
}

// runView is the API form of a run. st is nil in listings and right after
// start, where the row says all there is to say.
func (s *server) runView(run catalog.Run, st *runstate.Status) gen.Run {
	self := s.runPath(run)
	v := gen.Run{
		Id: run.ID, Project: run.Project, Workflow: run.Workflow, State: gen.RunState(run.State),
		CreatedAt: run.CreatedAt, UpdatedAt: run.UpdatedAt,
		Links:     gen.RunLinks{Self: self, Events: self + "/events"},
		CreatedBy: opt(run.CreatedBy),
	}
	if run.Pipeline != "" {
		v.Pipeline = ptr(run.Pipeline)
		v.Version = ptr(run.Version)
	}
	v.Links.TemporalUI = opt(s.eng.UIURL(run.ID))
	v.MetricValue = run.MetricValue
	if st != nil {
		rs := runStatusView(*st)
		v.Status = &rs
		v.State = rs.State
	}
	return v
}

func runStatusView(st runstate.Status) gen.RunStatus {
	out := gen.RunStatus{
		RunId: st.RunID, Project: st.Project, Pipeline: opt(st.Pipeline), Version: opt(st.Version),
		Workflow: st.Workflow, State: gen.RunState(st.State), Seq: st.Seq,
		StartedAt: st.StartedAt, FinishedAt: st.FinishedAt, Error: opt(st.Error),
		Cancel: cancelView(st.Cancel), Params: optMap(st.Params),
		Result: st.Result, Warnings: optSlice(st.Warnings), ScheduleId: opt(st.ScheduleID), RetryOf: opt(st.RetryOf),
		CacheBypass: opt(st.CacheBypass),
		ParentRun:   opt(st.ParentRun), ParentStep: opt(st.ParentStep),
		Targets: optSlice(st.Targets),
	}
	if st.Steps != nil { // nil stays null, as before
		out.Steps = stepViews(st.Steps)
	}
	return out
}

func stepViews(steps []runstate.StepStatus) []gen.StepStatus { return views(steps, stepView) }

func stepView(st runstate.StepStatus) gen.StepStatus {
	out := gen.StepStatus{
		Name: st.Name, Kind: st.Kind, State: gen.StepState(st.State),
		StartedAt: st.StartedAt, FinishedAt: st.FinishedAt,
		Outputs: st.Outputs, Error: opt(st.Error), Message: opt(st.Message), Item: st.Item,
	}
	out.Attempts = optSlice(views(st.Attempts, attemptView))
	out.Approval = approvalView(st.Approval)
	out.OnExit = opt(st.OnExit)
	out.CacheKey = opt(st.CacheKey)
	out.CachedFrom = cacheSourceView(st.CachedFrom)
	out.Wide = wideView(st.Wide)
	out.Artifacts = optSlice(views(st.Artifacts, artifactView))
	out.Inputs = optSlice(views(st.Inputs, artifactView))
	out.Metrics = metricsView(st.Metrics)
	if len(st.Items) > 0 {
		items := stepViews(st.Items)
		out.Items = &items
	}
	return out
}

func attemptView(a runstate.Attempt) gen.Attempt {
	return gen.Attempt{
		Number: a.Number, State: gen.StepState(a.State), StartedAt: a.StartedAt, FinishedAt: a.FinishedAt,
		ExitCode: a.ExitCode, Error: opt(a.Error), LogUrl: opt(a.LogURL),
		Cluster: opt(a.Cluster), Object: opt(a.Object), Links: optMap(a.Links), Message: opt(a.Message),
		ChildRun:  childRunView(a.ChildRun),
		Execution: opt(a.Execution),
	}
}

func childRunView(c *runstate.ChildRun) *gen.ChildRun {
	if c == nil {
		return nil
	}
	return &gen.ChildRun{RunId: c.RunID, Pipeline: c.Pipeline, Version: c.Version}
}

func approvalView(a *runstate.ApprovalStatus) *gen.ApprovalStatus {
	if a == nil {
		return nil
	}
	return &gen.ApprovalStatus{
		Message: opt(a.Message), Roles: views(a.Roles, func(r string) string { return r }),
		CommentRequired: opt(a.CommentRequired), Deadline: a.Deadline,
		OnTimeout: opt(gen.ApprovalStatusOnTimeout(a.OnTimeout)), Decision: opt(gen.ApprovalStatusDecision(a.Decision)),
		Approver: opt(a.Approver), ApproverId: opt(a.ApproverID), ApproverRole: opt(a.ApproverRole),
		Comment: opt(a.Comment), DecidedAt: a.DecidedAt, TimedOut: opt(a.TimedOut),
	}
}

func artifactView(a runstate.Artifact) gen.Artifact {
	p := a.Producer
	return gen.Artifact{
		Id: a.ID, Name: a.Name, From: opt(a.From), Type: a.Type, Digest: a.Digest, Size: a.Size, Files: opt(a.Files),
		Producer: gen.ArtifactProducer{Run: p.Run, Step: p.Step, Item: p.Item, Attempt: p.Attempt},
		Register: opt(a.Register),
		Source:   opt(a.Source),
	}
}

func modelView(m catalog.Model) gen.Model {
	aliases := m.Aliases
	if aliases == nil {
		aliases = map[string]int{}
	}
	return gen.Model{Name: m.Name, Description: m.Description, Latest: m.Latest, CreatedAt: m.CreatedAt, CreatedBy: m.CreatedBy, Aliases: aliases}
}

func modelVersionView(v catalog.ModelVersion) gen.ModelVersion {
	meta, aliases := v.Metadata, v.Aliases
	if meta == nil {
		meta = map[string]any{}
	}
	if aliases == nil {
		aliases = []string{}
	}
	return gen.ModelVersion{
		Model: v.Model, Version: v.Version, Artifact: artifactView(v.Artifact), Format: v.Format,
		Metadata: meta, CreatedAt: v.CreatedAt, CreatedBy: v.CreatedBy, Aliases: aliases,
	}
}

func storedArtifactView(a catalog.StoredArtifact) gen.Artifact {
	v := artifactView(a.Artifact)
	v.CreatedAt = &a.CreatedAt
	return v
}

func artifactUseView(u catalog.ArtifactUse) gen.ArtifactUse {
	return gen.ArtifactUse{Run: u.Run, Step: u.Step, Item: u.Item, Input: u.Input, At: u.At}
}

func consumedArtifactView(c catalog.ConsumedArtifact) gen.ConsumedArtifact {
	return gen.ConsumedArtifact{Use: artifactUseView(c.Use), Artifact: storedArtifactView(c.Artifact)}
}

func cacheSourceView(c *runstate.CacheSource) *gen.CacheSource {
	if c == nil {
		return nil
	}
	return &gen.CacheSource{Run: c.Run, Step: c.Step, Item: c.Item, Attempt: opt(c.Attempt), At: c.At}
}

func cacheEntryView(e catalog.CacheEntry) gen.CacheEntry {
	outputs := e.Outputs
	if outputs == nil {
		outputs = map[string]any{}
	}
	return gen.CacheEntry{
		Key: e.Key, Pipeline: e.Pipeline, Step: e.Step, Item: e.Item, RunId: e.RunID, Attempt: e.Attempt,
		Outputs: outputs, CreatedAt: e.CreatedAt, ExpiresAt: e.ExpiresAt,
		Artifacts: optSlice(views(e.Artifacts, artifactView)),
		Metrics:   metricsView(e.Metrics),
	}
}

// metricsView is what a step (or the cache entry of one) reported.
func metricsView(m *runstate.Metrics) *gen.StepMetrics {
	if m == nil {
		return nil
	}
	return &gen.StepMetrics{Scalars: optMap(m.Scalars), Series: optMap(m.Series)}
}

func cancelView(c *runstate.CancelRequest) *gen.CancelRequest {
	if c == nil {
		return nil
	}
	return &gen.CancelRequest{Reason: c.Reason, Requester: c.Requester, At: c.At}
}

// runEvent is the data of an SSE run event: the status without its steps.
func runEvent(st runstate.Status) gen.RunEvent {
	return gen.RunEvent{
		RunId: st.RunID, Project: st.Project, Workflow: st.Workflow, State: gen.RunState(st.State), Seq: st.Seq,
		StartedAt: st.StartedAt, FinishedAt: st.FinishedAt, Cancel: cancelView(st.Cancel),
		Pipeline: opt(st.Pipeline), Version: optIf(st.Pipeline != "", st.Version), Error: opt(st.Error),
	}
}

// opt is nil for the zero value, like omitempty on the internal field.
func opt[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

func optIf[T any](ok bool, v T) *T {
	if !ok {
		return nil
	}
	return &v
}

// views converts every element of in; never nil, so lists encode as [].
func views[T, V any](in []T, f func(T) V) []V {
	out := make([]V, len(in))
	for i, x := range in {
		out[i] = f(x)
	}
	return out
}

func optSlice[T any](v []T) *[]T {
	if len(v) == 0 {
		return nil
	}
	return &v
}

func optMap[K comparable, V any](m map[K]V) *map[K]V {
	if len(m) == 0 {
		return nil
	}
	return &m
}

// endpointView is the REST form of an endpoint's workflow status.
func endpointView(st activities.EndpointStatus, ui string) gen.Endpoint {
	v := gen.Endpoint{
		Project: st.Project, Name: st.Name, Current: st.Current, Stable: st.Stable, Deleting: st.Deleting,
		Spec: json.RawMessage(`{}`),
		Replicas: views(st.Replicas, func(r inference.RevisionReplicas) gen.RevisionReplicas {
			return gen.RevisionReplicas{Revision: r.Revision, Replicas: r.Replicas}
		}),
		Traffic: views(st.Traffic, func(w inference.RevisionWeight) gen.RevisionWeight {
			return gen.RevisionWeight{Revision: w.Revision, Weight: w.Weight}
		}),
		Revisions: views(st.Revisions, func(r inference.Revision) gen.EndpointRevision {
			return gen.EndpointRevision{Number: r.Number, Digest: r.Digest, CreatedAt: r.Created, RollbackOf: opt(r.RollbackOf)}
		}),
		Observed: views(st.Observed, func(o activities.RevisionObservation) gen.EndpointObserved {
			return gen.EndpointObserved{Revision: o.Revision, Replicas: o.Replicas, Ready: o.Status.Ready,
				CrashLooping: opt(o.Status.CrashLooping), Waiting: opt(o.Waiting)}
		}),
		Events: views(st.Events, func(e activities.EndpointEvent) gen.EndpointEvent {
			return gen.EndpointEvent{At: e.At, Kind: e.Kind, Revision: opt(e.Revision), Message: e.Message}
		}),
		TrafficMode: opt(st.TrafficMode), TemporalUI: opt(ui),
	}
	for _, r := range st.Revisions {
		if r.Number == st.Current {
			if b, err := json.Marshal(r.Spec); err == nil {
				v.Spec = b
			}
		}
	}
	if ro := st.Rollout; ro != nil {
		v.Rollout = &gen.EndpointRollout{Revision: ro.Candidate, Strategy: string(ro.Settings.Strategy), Stage: string(ro.State.Stage), Action: "Progress"}
		if ls := st.LastStep; ls != nil {
			v.Rollout.Action, v.Rollout.Reason, v.Rollout.FailedGate = string(ls.Action), opt(ls.Reason), opt(string(ls.FailedGate))
		}
	}
	if d := st.LastScale; d != nil {
		v.Scale = &gen.EndpointScale{Desired: d.Desired, Reason: string(d.Reason), Message: d.Message(), MetricsUnknown: opt(d.MetricsUnknown)}
	}
	v.Held = opt(st.Held)
	if w := st.Window; w != nil {
		v.Window = &gen.EndpointTrafficWindow{Revision: w.Revision, From: w.From, Requests: w.Requests, Errors: w.Errors}
		if p99 := w.Latency.Quantile(0.99); !math.IsNaN(p99) && !math.IsInf(p99, 0) {
			v.Window.P99LatencyMs = &p99
		}
	}
	if q := st.Quota; q != nil {
		v.Quota = &gen.EndpointQuota{Fits: q.Fits, Message: q.Message()}
	}
	// Lists are never null.
	for _, l := range []*[]gen.RevisionReplicas{&v.Replicas} {
		if *l == nil {
			*l = []gen.RevisionReplicas{}
		}
	}
	if v.Traffic == nil {
		v.Traffic = []gen.RevisionWeight{}
	}
	if v.Revisions == nil {
		v.Revisions = []gen.EndpointRevision{}
	}
	if v.Observed == nil {
		v.Observed = []gen.EndpointObserved{}
	}
	if v.Events == nil {
		v.Events = []gen.EndpointEvent{}
	}
	return v
}

// scheduleView is the REST view of a schedule.
func scheduleView(v runclient.ScheduleView) gen.Schedule {
	out := gen.Schedule{
		Project: v.Project, Name: v.Name, Pipeline: v.Pipeline, Version: v.Version, Params: optMap(v.Params),
		Workflow: opt(v.Workflow), Cron: optSlice(v.Cron), TimeZone: opt(v.TimeZone), Overlap: overlapName(v.Overlap),
		Paused: v.Paused, Note: opt(v.Note), Actions: v.Runs, SkippedOverlap: v.SkippedOverlap,
		NextRuns: orEmpty(v.NextRuns), RecentRuns: []gen.ScheduledRun{}, CreatedBy: opt(v.CreatedBy),
	}
	if len(v.Input) > 0 {
		out.Input = &v.Input
	}
	if !v.CreatedAt.IsZero() {
		out.CreatedAt = &v.CreatedAt
	}
	var every []string
	for _, d := range v.Every {
		every = append(every, d.String())
	}
	out.Every = optSlice(every)
	if v.Jitter > 0 {
		out.Jitter = opt(v.Jitter.String())
	}
	if v.CatchupWindow > 0 {
		out.CatchupWindow = opt(v.CatchupWindow.String())
	}
	for _, r := range v.RecentRuns {
		out.RecentRuns = append(out.RecentRuns, gen.ScheduledRun{RunId: r.RunID, ScheduledAt: r.ScheduledAt, StartedAt: r.StartedAt})
	}
	return out
}

func overlapName(p enumspb.ScheduleOverlapPolicy) gen.ScheduleOverlap {
	for name, v := range overlapPolicies {
		if v == p {
			return name
		}
	}
	return gen.Skip // Temporal's unspecified policy is skip
}

func orEmpty[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

// secretView is what REST shows of a secret: never its value (the
// catalogue does not even hold it in clear).
func secretView(s catalog.Secret) gen.Secret {
	return gen.Secret{Project: s.Project, Name: s.Name, Version: s.Version, CreatedAt: s.CreatedAt.UTC(),
		UpdatedAt: s.UpdatedAt.UTC(), UpdatedBy: s.UpdatedBy}
}

func secretEventView(e catalog.SecretEvent) gen.SecretEvent {
	return gen.SecretEvent{Name: e.Name, Action: gen.SecretEventAction(e.Action), Actor: e.Actor, At: e.At.UTC()}
}
