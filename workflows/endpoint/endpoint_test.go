package endpoint_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/platform/telemetry/telemetrytest"
	"github.com/atelier-ml/atelier/schema"
	"github.com/atelier-ml/atelier/workflows/endpoint"
)

// fakeServing plays where an endpoint runs: replicas become ready at once
// (unless their revision crash-loops), each reports load/replicas as its
// queue, and every revision answers requests with its error rate.
type fakeServing struct {
	env *testsuite.TestWorkflowEnvironment

	mu        sync.Mutex
	replicas  map[int]int
	traffic   []inference.RevisionWeight
	deleted   []int
	gone      bool
	load      float64         // requests in flight over the whole endpoint
	errorRate map[int]float64 // per revision
	crashing  map[int]bool
	applies   int
	// noMetrics: the runtime reads no traffic figures (Kubernetes without
	// a metrics source): only the gateway proxy's reports count.
	noMetrics bool
	headroom  activities.EndpointHeadroom
	started   map[int]bool // revisions that ever had a replica
	probes    int          // synthetic probes sent
}

func newFakeServing(env *testsuite.TestWorkflowEnvironment) *fakeServing {
	f := &fakeServing{env: env, replicas: map[int]int{}, errorRate: map[int]float64{}, crashing: map[int]bool{}, started: map[int]bool{}}
	env.RegisterActivityWithOptions(f.observe, activity.RegisterOptions{Name: activities.ObserveEndpointName})
	env.RegisterActivityWithOptions(f.apply, activity.RegisterOptions{Name: activities.ApplyEndpointLayoutName})
	env.RegisterActivityWithOptions(f.deleteRevisions, activity.RegisterOptions{Name: activities.DeleteEndpointRevisionsName})
	env.RegisterActivityWithOptions(f.deleteEndpoint, activity.RegisterOptions{Name: activities.DeleteEndpointName})
	env.RegisterActivityWithOptions(func(context.Context, activities.EndpointRef) (activities.EndpointHeadroom, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.headroom, nil
	}, activity.RegisterOptions{Name: activities.EndpointHeadroomName})
	return f
}

func (f *fakeServing) observe(_ context.Context, req activities.ObserveEndpointRequest) (activities.ObserveEndpointResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.env.Now()
	out := activities.ObserveEndpointResult{At: now}
	total := 0
	for _, n := range f.replicas {
		total += n
	}
	for _, rev := range req.Revisions {
		n := f.replicas[rev]
		o := activities.RevisionObservation{Revision: rev, Replicas: n}
		if f.crashing[rev] {
			o.Status.CrashLooping = n
		} else {
			o.Status.Ready = n
			for i := range n {
				o.Queue = append(o.Queue, inference.Observation{At: now, Replica: fmt.Sprintf("r%d-%d", rev, i),
					Signal: inference.QueueSignal{Running: f.load / float64(total), Known: true}})
			}
		}
		if rev == req.Measured && f.noMetrics && req.Probes > 0 && n > 0 {
			if req.ProbeModel != "tiny" {
				panic("probes for model " + req.ProbeModel)
			}
			o.Probed = &inference.RevisionTraffic{Revision: rev, Requests: int64(req.Probes), Errors: int64(float64(req.Probes) * f.errorRate[rev])}
			f.probes += req.Probes
		}
		if rev == req.Measured && !f.noMetrics {
			o.Status.MetricsKnown = true
			o.Status.Requests = 200
			o.Status.Errors = int64(200 * f.errorRate[rev])
			o.Status.P99LatencyMs = 50
		}
		out.Revisions = append(out.Revisions, o)
	}
	return out, nil
}

func (f *fakeServing) apply(_ context.Context, req activities.ApplyEndpointLayoutRequest) (activities.ApplyEndpointLayoutResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range req.Revisions {
		if r.Spec.Image == "" {
			return activities.ApplyEndpointLayoutResult{}, errors.New("layout without a spec")
		}
		f.replicas[r.Revision] = r.Replicas
		if r.Replicas > 0 {
			f.started[r.Revision] = true
		}
	}
	f.traffic = req.Traffic
	f.applies++
	return activities.ApplyEndpointLayoutResult{TrafficMode: "fake"}, nil
}

func (f *fakeServing) deleteRevisions(_ context.Context, req activities.DeleteEndpointRevisionsRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range req.Revisions {
		delete(f.replicas, r)
		f.deleted = append(f.deleted, r)
	}
	return nil
}

func (f *fakeServing) deleteEndpoint(context.Context, activities.EndpointRef) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replicas, f.gone = map[int]int{}, true
	return nil
}

func (f *fakeServing) set(fn func(f *fakeServing)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func endpointSpec(image string) inference.EndpointSpec {
	minR := 1
	return inference.EndpointSpec{
		Backend: inference.BackendVLLM, Model: inference.Model{Name: "tiny"}, Image: image,
		Replicas: inference.ReplicaRange{Min: &minR, Max: 5},
		Autoscaling: inference.Autoscaling{TargetQueuePerReplica: 10, StableWindow: schema.Duration(20 * time.Second),
			ScaleDownDelay: schema.DurationPtr(20 * time.Second)},
		Rollout: inference.RolloutSettings{Gates: inference.GateSettings{MinSamples: 10, AnalysisInterval: schema.Duration(10 * time.Second)}},
	}
}

// endpointHarness runs an endpoint workflow in the test environment and
// lets a test script it in workflow time.
type endpointHarness struct {
	t       *testing.T
	env     *testsuite.TestWorkflowEnvironment
	rt      *fakeServing
	updates int // update IDs must be unique: Temporal deduplicates them
	reg     *prometheus.Registry
}

func newEndpointHarness(t *testing.T) *endpointHarness {
	var suite testsuite.WorkflowTestSuite
	reg := prometheus.NewRegistry()
	suite.SetMetricsHandler(telemetry.NewSDKHandler(reg, telemetry.Options{}))
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(endpoint.Workflow, workflow.RegisterOptions{Name: activities.EndpointWorkflowName})
	return &endpointHarness{t: t, env: env, rt: newFakeServing(env), reg: reg}
}

// gauge reads one of the endpoint's replica gauges.
func (h *endpointHarness) gauge(name string) float64 {
	h.t.Helper()
	v, err := telemetrytest.Gather(h.reg)
	require.NoError(h.t, err)
	return v[telemetrytest.Series(name, "endpoint", "vision/chat")]
}

func (h *endpointHarness) status() activities.EndpointStatus {
	h.t.Helper()
	v, err := h.env.QueryWorkflow(activities.QueryEndpointStatus)
	require.NoError(h.t, err)
	var st activities.EndpointStatus
	require.NoError(h.t, v.Get(&st))
	return st
}

// at runs fn at workflow time d after the start.
func (h *endpointHarness) at(d time.Duration, fn func()) {
	h.env.RegisterDelayedCallback(fn, d)
}

// update sends an update and records its outcome.
func (h *endpointHarness) update(name string, out *updateOutcome, args ...any) {
	h.updates++
	h.env.UpdateWorkflow(name, fmt.Sprintf("%s-%d", name, h.updates), &testsuite.TestUpdateCallback{
		OnReject:   func(err error) { out.rejected = err },
		OnAccept:   func() {},
		OnComplete: func(v any, err error) { out.result, out.err = v, err },
	}, args...)
}

type updateOutcome struct {
	rejected, err error
	result        any
}

func (h *endpointHarness) run(d time.Duration) {
	h.runSpec(d, endpointSpec("img:1"))
}

// runSpec runs the workflow from spec until it is deleted at d.
func (h *endpointHarness) runSpec(d time.Duration, spec inference.EndpointSpec) {
	h.at(d, func() {
		var out updateOutcome
		h.update(activities.UpdateEndpointDelete, &out)
	})
	h.env.ExecuteWorkflow(endpoint.Workflow, activities.EndpointInput{
		Project: "vision", Name: "chat", Spec: spec, TaskQueue: "q",
	})
	require.True(h.t, h.env.IsWorkflowCompleted())
	require.NoError(h.t, h.env.GetWorkflowError())
}

func eventKinds(st activities.EndpointStatus) string {
	var k []string
	for _, e := range st.Events {
		k = append(k, e.Kind)
	}
	return strings.Join(k, " ")
}

// A new endpoint rolls out revision 1, then the autoscaler follows load
// up (quickly) and down (after the delay), and deletion removes it.
func TestEndpointRollsOutAndScales(t *testing.T) {
	h := newEndpointHarness(t)
	var mid, up, down activities.EndpointStatus
	var desiredUp, readyUp float64
	h.at(30*time.Second, func() { mid = h.status() })
	h.at(31*time.Second, func() { h.rt.set(func(f *fakeServing) { f.load = 45 }) })
	h.at(50*time.Second, func() {
		up = h.status()
		desiredUp, readyUp = h.gauge("atelier_endpoint_replicas_desired"), h.gauge("atelier_endpoint_replicas_ready")
	})
	h.at(51*time.Second, func() { h.rt.set(func(f *fakeServing) { f.load = 0 }) })
	h.at(3*time.Minute, func() { down = h.status() })
	h.run(4 * time.Minute)

	require.Equal(t, 1, mid.Stable, "revision 1 promoted: %s", eventKinds(mid))
	require.Equal(t, "q", mid.TaskQueue, "the status says where the endpoint runs (the gateway refuses pod settings on a local one)")
	require.Nil(t, mid.Rollout)
	require.Equal(t, []inference.RevisionReplicas{{Revision: 1, Replicas: 1}}, mid.Replicas)
	require.Equal(t, []inference.RevisionWeight{{Revision: 1, Weight: 100}}, mid.Traffic)
	require.Equal(t, 5, up.Replicas[0].Replicas, "45 in flight at a target of 10 per replica: 5 replicas (the max): %+v", up.LastScale)
	require.Equal(t, 1, down.Replicas[0].Replicas, "idle: back to the minimum after the delay: %+v", down.LastScale)
	require.True(t, h.rt.gone, "deletion removed the endpoint")
	require.Equal(t, 5.0, desiredUp, "the desired replicas gauge follows the autoscaler")
	require.Positive(t, readyUp)
	require.Zero(t, h.gauge("atelier_endpoint_replicas_desired"), "a deleted endpoint reads 0")
	require.Contains(t, eventKinds(down), "RevisionCreated RolloutStarted")
	require.Contains(t, eventKinds(down), "RolloutPromote")
}

// An update that changes the image rolls revision 2 out and deletes
// revision 1; one that changes only the autoscaling applies in place; an
// invalid one is refused with every problem; a second template change
// during a rollout is refused.
func TestEndpointUpdatesRollOut(t *testing.T) {
	h := newEndpointHarness(t)
	var bad, img, during, settings updateOutcome
	var rolling, after activities.EndpointStatus
	h.at(20*time.Second, func() {
		s := endpointSpec("")
		s.Replicas.Max = -1
		h.update(activities.UpdateEndpointSpec, &bad, s)
	})
	h.at(21*time.Second, func() { h.update(activities.UpdateEndpointSpec, &img, endpointSpec("img:2")) })
	h.at(22*time.Second, func() {
		rolling = h.status()
		h.update(activities.UpdateEndpointSpec, &during, endpointSpec("img:3"))
	})
	h.at(2*time.Minute, func() {
		after = h.status()
		s := endpointSpec("img:2")
		s.Autoscaling.TargetQueuePerReplica = 5
		h.update(activities.UpdateEndpointSpec, &settings, s)
	})
	var final activities.EndpointStatus
	h.at(150*time.Second, func() { final = h.status() })
	h.run(3 * time.Minute)

	require.Error(t, bad.rejected)
	require.ErrorContains(t, bad.rejected, "image")
	require.ErrorContains(t, bad.rejected, "replicas")
	require.NoError(t, img.rejected)
	require.Equal(t, 2, rolling.Current)
	require.NotNil(t, rolling.Rollout, "revision 2 rolls out")
	require.ErrorContains(t, during.rejected, "still rolling out")

	require.Equal(t, 2, after.Stable, "revision 2 promoted: %s", eventKinds(after))
	require.Contains(t, h.rt.deleted, 1, "revision 1's replicas are deleted")

	require.NoError(t, settings.rejected)
	require.Equal(t, 3, final.Current, "a settings change is a revision")
	require.Equal(t, 2, final.Stable, "…that keeps revision 2's replicas")
	require.Nil(t, final.Rollout)
	require.Equal(t, 5.0, final.Scaler.Config.Target)
}

// A canary whose error rate fails the gate is rolled back automatically:
// revision 1 keeps serving and the canary's replicas are deleted.
func TestEndpointCanaryRollsBackOnErrors(t *testing.T) {
	h := newEndpointHarness(t)
	var upd updateOutcome
	var after activities.EndpointStatus
	h.at(20*time.Second, func() {
		h.rt.set(func(f *fakeServing) { f.errorRate[2] = 0.3 })
		s := endpointSpec("img:broken")
		s.Rollout.Strategy = inference.StrategyCanary
		s.Rollout.Canary.Steps = []inference.CanaryStep{{Weight: 20, Pause: schema.Duration(30 * time.Second)}, {Weight: 60, Pause: schema.Duration(30 * time.Second)}}
		s.Rollout.Gates.MaxErrorRate = 0.05
		h.update(activities.UpdateEndpointSpec, &upd, s)
	})
	h.at(2*time.Minute, func() { after = h.status() })
	h.run(3 * time.Minute)

	require.NoError(t, upd.rejected)
	require.Equal(t, 1, after.Stable, "revision 1 still serves: %s", eventKinds(after))
	require.Nil(t, after.Rollout)
	require.Contains(t, eventKinds(after), "RolloutRollBack")
	require.Contains(t, h.rt.deleted, 2, "the canary's replicas are deleted")
	require.Equal(t, []inference.RevisionWeight{{Revision: 1, Weight: 100}}, after.Traffic)
}

// canarySpec is a two-step canary judged on error rate.
func canarySpec(image string) inference.EndpointSpec {
	s := endpointSpec(image)
	s.Rollout.Strategy = inference.StrategyCanary
	s.Rollout.Canary.Steps = []inference.CanaryStep{{Weight: 20, Pause: schema.Duration(30 * time.Second)}, {Weight: 60, Pause: schema.Duration(30 * time.Second)}}
	s.Rollout.Gates.MaxErrorRate = 0.05
	return s
}

// Where the runtime reads no traffic figures, the gateway proxy's reports
// (signals) are what the canary's error-rate gate judges: clean traffic
// promotes the canary, a 5xx burst rolls it back, and no traffic at all
// never passes.
func TestEndpointCanaryJudgedOnProxyReports(t *testing.T) {
	for _, tc := range []struct {
		name      string
		errorRate float64
		requests  int64
		want      int // stable revision at the end
		event     string
	}{
		{"clean traffic promotes", 0, 20, 2, "RolloutPromote"},
		{"5xx burst rolls back", 0.5, 20, 1, "RolloutRollBack"},
		{"no traffic never passes", 0, 0, 0, "RolloutProgress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newEndpointHarness(t)
			h.rt.set(func(f *fakeServing) { f.noMetrics = true })
			var upd updateOutcome
			var after activities.EndpointStatus
			h.at(20*time.Second, func() { h.update(activities.UpdateEndpointSpec, &upd, canarySpec("img:2")) })
			// The proxy reports every few seconds: requests split 20/80
			// (then 60/40) between the canary and revision 1.
			for at := 21 * time.Second; at < 3*time.Minute; at += 3 * time.Second {
				h.at(at, func() {
					if tc.requests == 0 {
						return
					}
					h.env.SignalWorkflow(activities.SignalEndpointTraffic, activities.EndpointTraffic{Revisions: []inference.RevisionTraffic{
						{Revision: 1, Requests: 3 * tc.requests},
						{Revision: 2, Requests: tc.requests, Errors: int64(float64(tc.requests) * tc.errorRate)},
					}})
				})
			}
			h.at(170*time.Second, func() { after = h.status() })
			h.run(3 * time.Minute)

			require.NoError(t, upd.rejected)
			require.Contains(t, eventKinds(after), tc.event)
			if tc.want == 0 {
				require.NotNil(t, after.Rollout, "without samples the canary neither passes nor fails: %s", eventKinds(after))
				require.Equal(t, 1, after.Stable)
				require.NotNil(t, after.Window)
				require.Zero(t, after.Window.Requests)
				require.Contains(t, after.LastStep.Reason, "samples", "the step says why it waits")
				return
			}
			require.Equal(t, tc.want, after.Stable, "%s", eventKinds(after))
			require.Nil(t, after.Rollout)
		})
	}
}

// At zero replicas, a request held by the gateway's proxy wakes the
// endpoint at once, without waiting for its tick, and the held count is
// the demand that sizes it.
func TestEndpointWakesFromZeroOnHeldRequests(t *testing.T) {
	h := newEndpointHarness(t)
	spec := endpointSpec("img:1")
	zero := 0
	spec.Replicas.Min = &zero
	spec.Autoscaling.IdleTimeout = schema.Duration(30 * time.Second)
	var asleep, woken activities.EndpointStatus
	h.at(100*time.Second, func() { asleep = h.status() })
	h.at(101*time.Second+300*time.Millisecond, func() {
		h.env.SignalWorkflow(activities.SignalEndpointTraffic, activities.EndpointTraffic{Held: 25})
	})
	h.at(101*time.Second+400*time.Millisecond, func() { woken = h.status() })
	h.at(110*time.Second, func() { h.env.SignalWorkflow(activities.SignalEndpointTraffic, activities.EndpointTraffic{Held: 0}) })
	h.at(2*time.Minute, func() {
		var out updateOutcome
		h.update(activities.UpdateEndpointDelete, &out)
	})
	h.env.ExecuteWorkflow(endpoint.Workflow, activities.EndpointInput{Project: "vision", Name: "chat", Spec: spec, TaskQueue: "q"})
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())

	require.Equal(t, []inference.RevisionReplicas{{Revision: 1, Replicas: 0}}, asleep.Replicas, "idle: scaled to zero: %+v", asleep.LastScale)
	require.Equal(t, 25, woken.Held)
	// Decided within 100 ms of the report, not at the next tick: the first
	// replica (activation); the held load then sizes the rest as the
	// windows fill.
	require.Equal(t, 1, woken.Replicas[0].Replicas, "%+v", woken.LastScale)
	require.Equal(t, 25.0, woken.LastScale.Held)
}

// A rollout whose GPUs exceed the project's quota headroom is aborted
// before it creates a replica, saying which plan would fit; that plan
// then rolls out.
func TestEndpointRolloutChecksGPUQuota(t *testing.T) {
	h := newEndpointHarness(t)
	gpuSpec := func(image string) inference.EndpointSpec {
		s := endpointSpec(image)
		two := 2
		s.Replicas = inference.ReplicaRange{Min: &two, Max: 2}
		s.Resources = inference.Resources{GPUType: "NVIDIA-L4", GPUs: 1}
		return s
	}
	h.rt.set(func(f *fakeServing) {
		f.headroom = activities.EndpointHeadroom{Limited: true, Headroom: []inference.GPUAmount{{Type: "NVIDIA-L4", GPUs: 2}}}
	})
	var blue, rolling updateOutcome
	var refused, after activities.EndpointStatus
	h.at(30*time.Second, func() {
		// Revision 1 holds 2 L4s; the quota is 3: 1 left.
		h.rt.set(func(f *fakeServing) { f.headroom.Headroom[0].GPUs = 1 })
		s := gpuSpec("img:2")
		s.Rollout.Strategy = inference.StrategyBlueGreen
		h.update(activities.UpdateEndpointSpec, &blue, s)
	})
	h.at(40*time.Second, func() {
		refused = h.status()
		s := gpuSpec("img:3")
		one := 1
		s.Rollout.MaxSurge = &one
		h.update(activities.UpdateEndpointSpec, &rolling, s)
	})
	h.at(170*time.Second, func() { after = h.status() })
	h.runSpec(3*time.Minute, gpuSpec("img:1"))
	require.NoError(t, blue.rejected)
	require.Equal(t, 1, refused.Stable, "%s", eventKinds(refused))
	require.Nil(t, refused.Rollout)
	require.Contains(t, eventKinds(refused), "RolloutExceedsQuota")
	require.NotNil(t, refused.Quota)
	require.False(t, refused.Quota.Fits)
	require.Contains(t, refused.Quota.Message(), "1 more NVIDIA-L4")
	require.False(t, h.rt.started[2], "revision 2 never got a replica")
	require.NoError(t, rolling.rejected)
	require.Equal(t, 3, after.Stable, "a maxSurge 1 rolling rollout fits and is promoted: %s", eventKinds(after))
	require.True(t, after.Quota == nil || after.Quota.Fits)
}

// Without any traffic, a canary whose gates allow synthetic probes asks
// the runtime for the missing samples: a healthy canary is promoted on
// them, a failing one rolled back.
func TestEndpointCanaryJudgedOnSyntheticProbes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		errorRate float64
		want      int
	}{{"healthy", 0, 2}, {"failing", 0.5, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newEndpointHarness(t)
			h.rt.set(func(f *fakeServing) { f.noMetrics, f.errorRate[2] = true, tc.errorRate })
			var upd updateOutcome
			var after activities.EndpointStatus
			h.at(20*time.Second, func() {
				s := canarySpec("img:2")
				s.Rollout.Gates.SyntheticProbes = true
				h.update(activities.UpdateEndpointSpec, &upd, s)
			})
			h.at(170*time.Second, func() { after = h.status() })
			h.run(3 * time.Minute)
			require.NoError(t, upd.rejected)
			require.Equal(t, tc.want, after.Stable, "%s", eventKinds(after))
			require.Nil(t, after.Rollout)
			require.Positive(t, h.rt.probes)
			require.LessOrEqual(t, h.rt.probes, 4*10, "probes only make up for missing samples (10 per window)")
		})
	}
}

// An endpoint following an alias rolls out the version the alias names
// when it moves (and only for its own alias), keeps serving when the alias
// is removed, and a rollback serves the earlier version again.
func TestEndpointFollowsItsModelAlias(t *testing.T) {
	h := newEndpointHarness(t)
	var mu sync.Mutex
	version, resolves, removed := 3, 0, false
	var endpoints []string
	h.env.RegisterActivityWithOptions(func(_ context.Context, req activities.ResolveEndpointModelRequest) (activities.ResolveEndpointModelResult, error) {
		mu.Lock()
		defer mu.Unlock()
		resolves++
		endpoints = append(endpoints, req.Endpoint)
		if removed {
			return activities.ResolveEndpointModelResult{Model: req.Model, Problem: `model sentiment has no version or alias "champion" in project vision`}, nil
		}
		m := req.Model
		m.Registered = registered(version)
		return activities.ResolveEndpointModelResult{Model: m}, nil
	}, activity.RegisterOptions{Name: activities.ResolveEndpointModelName})
	spec := endpointSpec("img:1")
	spec.Model = inference.Model{Name: "tiny", Ref: "sentiment@champion", Follow: true, Registered: registered(3)}
	signal := func(model, alias string) {
		h.env.SignalWorkflow(activities.SignalEndpointModelMoved, activities.ModelMoved{Model: model, Alias: alias})
	}
	var moved, gone, rolledBack activities.EndpointStatus
	var resolvesOthers int
	h.at(30*time.Second, func() { signal("sentiment", "candidate"); signal("other", "champion") })
	h.at(35*time.Second, func() {
		mu.Lock()
		resolvesOthers, version = resolves, 4
		mu.Unlock()
		signal("sentiment", "champion")
	})
	h.at(2*time.Minute, func() { moved = h.status() })
	h.at(2*time.Minute+time.Second, func() {
		mu.Lock()
		removed = true
		mu.Unlock()
		signal("sentiment", "champion")
	})
	h.at(2*time.Minute+10*time.Second, func() { gone = h.status() })
	h.at(2*time.Minute+11*time.Second, func() {
		var out updateOutcome
		h.update(activities.UpdateEndpointRollback, &out, 1)
	})
	h.at(4*time.Minute, func() { rolledBack = h.status() })
	h.runSpec(5*time.Minute, spec)

	require.Zero(t, resolvesOthers, "moves of other aliases and models are not resolved")
	require.NotEmpty(t, endpoints)
	for _, e := range endpoints {
		require.Equal(t, "chat", e, "the resolution names the endpoint, which references the version it answers")
	}
	require.Len(t, moved.Revisions, 2, "one revision for the move: %s", eventKinds(moved))
	require.Equal(t, 4, moved.Revisions[1].Spec.Model.Registered.Version)
	require.Equal(t, 2, moved.Stable, "the new version rolled out and was promoted: %s", eventKinds(moved))
	require.Contains(t, eventText(moved), "revision 2 created: sentiment@champion moved from version 3 to 4")
	require.Len(t, gone.Revisions, 2, "a removed alias makes no revision")
	require.Contains(t, eventText(gone), "still serving version 4")
	require.Equal(t, 2, gone.Stable)
	require.Len(t, rolledBack.Revisions, 3)
	require.Equal(t, 3, rolledBack.Revisions[2].Spec.Model.Registered.Version, "a rollback serves the earlier version again")
	require.Equal(t, 3, rolledBack.Stable, "%s", eventKinds(rolledBack))
}

func registered(v int) *inference.RegisteredModel {
	return &inference.RegisteredModel{Model: "sentiment", Version: v, Alias: "champion", ArtifactID: fmt.Sprintf("a%d", v), Digest: fmt.Sprintf("sha256:%064d", v)}
}

func eventText(st activities.EndpointStatus) string {
	var k []string
	for _, e := range st.Events {
		k = append(k, e.Message)
	}
	return strings.Join(k, "\n")
}
