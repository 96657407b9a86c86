package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/deploy"
	"github.com/atelier-ml/atelier/client/endpointclient"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/stack/temporaltest"
	"github.com/atelier-ml/atelier/schema"
	"github.com/atelier-ml/atelier/workflows"
)

func TestMain(m *testing.M) { temporaltest.Main(m) }

// fakeRuntime plays the runtime an endpoint runs on, behind the endpoint
// workflow's activity contract (see workflows/endpoint_test.go's
// fakeServing): replicas are ready as soon as they are applied, and the
// measured revision answers 200 requests, half of them errors when its
// image says "bad".
type fakeRuntime struct {
	mu       sync.Mutex
	replicas map[string]map[int]int // by endpoint, then revision
	bad      map[string]map[int]bool
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{replicas: map[string]map[int]int{}, bad: map[string]map[int]bool{}}
}

func (f *fakeRuntime) register(w worker.Worker) {
	w.RegisterActivityWithOptions(f.observe, activity.RegisterOptions{Name: activities.ObserveEndpointName})
	w.RegisterActivityWithOptions(f.apply, activity.RegisterOptions{Name: activities.ApplyEndpointLayoutName})
	w.RegisterActivityWithOptions(f.deleteRevisions, activity.RegisterOptions{Name: activities.DeleteEndpointRevisionsName})
	w.RegisterActivityWithOptions(f.deleteEndpoint, activity.RegisterOptions{Name: activities.DeleteEndpointName})
}

func (f *fakeRuntime) observe(_ context.Context, req activities.ObserveEndpointRequest) (activities.ObserveEndpointResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := activities.ObserveEndpointResult{At: time.Now()}
	for _, rev := range req.Revisions {
		n := f.replicas[req.Endpoint][rev]
		o := activities.RevisionObservation{Revision: rev, Replicas: n, Status: inference.RevisionStatus{Ready: n}}
		if rev == req.Measured {
			o.Status.MetricsKnown, o.Status.Requests, o.Status.P99LatencyMs = true, 200, 50
			if f.bad[req.Endpoint][rev] {
				o.Status.Errors = 100
			}
		}
		out.Revisions = append(out.Revisions, o)
	}
	return out, nil
}

func (f *fakeRuntime) apply(_ context.Context, req activities.ApplyEndpointLayoutRequest) (activities.ApplyEndpointLayoutResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.replicas[req.Endpoint] == nil {
		f.replicas[req.Endpoint], f.bad[req.Endpoint] = map[int]int{}, map[int]bool{}
	}
	for _, r := range req.Revisions {
		f.replicas[req.Endpoint][r.Revision] = r.Replicas
		f.bad[req.Endpoint][r.Revision] = strings.Contains(r.Spec.Image, "bad")
	}
	return activities.ApplyEndpointLayoutResult{TrafficMode: "fake"}, nil
}

func (f *fakeRuntime) deleteRevisions(_ context.Context, req activities.DeleteEndpointRevisionsRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range req.Revisions {
		delete(f.replicas[req.Endpoint], r)
	}
	return nil
}

func (f *fakeRuntime) deleteEndpoint(_ context.Context, ref activities.EndpointRef) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.replicas, ref.Endpoint)
	return nil
}

// registry is a cluster registry holding the named clusters.
type registry []string

func (r registry) GetCluster(_ context.Context, name string) (catalog.Cluster, error) {
	if slices.Contains(r, name) {
		return catalog.Cluster{Name: name}, nil
	}
	return catalog.Cluster{}, catalog.ErrNotFound
}

// stages records what attempts report to their run.
type stages struct {
	mu   sync.Mutex
	msgs []string
}

func (s *stages) report(_ context.Context, p activities.StepProgress) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, p.Message)
	return nil
}

func (s *stages) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.msgs)
}

// harness is a local worker (endpoint workflows and the deploy activity
// on its queue) and a cluster worker (the fake runtime on the cluster's
// queue) on the test binary's real Temporal dev server.
type harness struct {
	t       *testing.T
	c       client.Client
	queue   string
	cluster string
	project string
	stages  *stages
	ec      *endpointclient.Client
}

func newHarness(t *testing.T, opts ...deploy.Option) *harness {
	c := temporaltest.Client(t)
	h := &harness{t: t, c: c, queue: temporaltest.TaskQueue(t), stages: &stages{},
		// Unique per run: the dev server (and its endpoint workflow IDs)
		// is shared by the binary's tests and by -count=N.
		cluster: fmt.Sprintf("gpu-%d", time.Now().UnixNano()%1e9),
		project: fmt.Sprintf("p%d-%d", os.Getpid(), time.Now().UnixNano()%1e9),
		ec:      endpointclient.New(c, temporaltest.Server(t).Namespace(), "")}

	local := worker.New(c, h.queue, worker.Options{})
	workflows.Register(local)
	local.RegisterWorkflowWithOptions(deployOnce, workflow.RegisterOptions{Name: "test.deploy"})
	deploy.New(h.ec, registry{h.cluster}, h.queue, append([]deploy.Option{
		deploy.WithPollInterval(200 * time.Millisecond), deploy.WithProgressReporter(h.stages.report)}, opts...)...).Register(local)
	cluster := worker.New(c, activities.TaskQueueForCluster(h.cluster), worker.Options{})
	newFakeRuntime().register(cluster)
	for _, w := range []worker.Worker{local, cluster} {
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
	}
	return h
}

// deployOnce runs one attempt of an inference step, as the pipeline
// workflow does (without its attempt loop).
func deployOnce(ctx workflow.Context, req activities.DeployEndpointRequest) (activities.DeployEndpointResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 2 * time.Minute,
		HeartbeatTimeout:    10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	var res activities.DeployEndpointResult
	err := workflow.ExecuteActivity(ctx, activities.DeployEndpointName, req).Get(ctx, &res)
	return res, err
}

// deploy runs an attempt to its end.
func (h *harness) deploy(endpoint, cluster string, spec inference.EndpointSpec) (activities.DeployEndpointResult, error) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := activities.DeployEndpointRequest{Project: h.project, RunID: "run-1", Step: "deploy", Attempt: 1,
		Endpoint: endpoint, Cluster: cluster, Spec: spec, Timeout: time.Minute}
	run, err := h.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: h.queue}, "test.deploy", req)
	if err != nil {
		h.t.Fatal(err)
	}
	var res activities.DeployEndpointResult
	err = run.Get(ctx, &res)
	return res, err
}

func (h *harness) status(endpoint string) activities.EndpointStatus {
	h.t.Helper()
	st, err := h.ec.Status(context.Background(), h.project, endpoint)
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

// canary is a vLLM endpoint rolled out in one canary step at 50%, judged
// on 10 requests with at most 5% errors.
func canary(image string) inference.EndpointSpec {
	return inference.EndpointSpec{
		Backend: inference.BackendVLLM, Model: inference.Model{URI: "s3://models/tiny", Name: "tiny"}, Image: image,
		Rollout: inference.RolloutSettings{Strategy: inference.StrategyCanary,
			Canary: inference.CanarySettings{Steps: []inference.CanaryStep{{Weight: 50}}},
			Gates:  inference.GateSettings{MaxErrorRate: 0.05, MinSamples: 10, AnalysisInterval: schema.Duration(time.Second)}},
	}
}

// appError is the application error an attempt failed with.
func appError(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an application error", err)
	}
	return ae
}

// One endpoint's life through inference steps: created and promoted,
// deployed again unchanged, updated through a canary, then a bad image
// whose canary fails its error-rate gate and is rolled back.
func TestDeployCreatesUpdatesAndFailsOnRollback(t *testing.T) {
	h := newHarness(t)

	res, err := h.deploy("chat", h.cluster, canary("vllm:1"))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if res.Revision != 1 || !res.Created || res.Cluster != h.cluster || res.Endpoint != "chat" {
		t.Fatalf("create: %+v", res)
	}
	if st := h.status("chat"); st.Stable != 1 {
		t.Fatalf("after create: stable revision %d, want 1", st.Stable)
	}

	res, err = h.deploy("chat", h.cluster, canary("vllm:1"))
	if err != nil || res.Revision != 1 || res.Created {
		t.Fatalf("same spec again: %+v, %v; want revision 1 at once", res, err)
	}

	res, err = h.deploy("chat", h.cluster, canary("vllm:2"))
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if res.Revision != 2 || res.Created {
		t.Fatalf("update: %+v", res)
	}
	if st := h.status("chat"); st.Stable != 2 {
		t.Fatalf("after update: stable revision %d, want 2", st.Stable)
	}
	if !slices.Contains(h.stages.all(), "revision 2: canary step 1 of 1: 50% of traffic") {
		t.Errorf("stages reported %q, want the canary step among them", h.stages.all())
	}

	_, err = h.deploy("chat", h.cluster, canary("vllm:bad"))
	ae := appError(t, err)
	if ae.Type() != activities.ErrTypeRolloutFailed || !ae.NonRetryable() {
		t.Errorf("rollback: type %s (non-retryable %v), want non-retryable %s", ae.Type(), ae.NonRetryable(), activities.ErrTypeRolloutFailed)
	}
	if want := `revision 3 of endpoint "chat" was rolled back: error rate Fail: 0.5 (max 0.05)`; ae.Message() != want {
		t.Errorf("rollback message %q, want %q", ae.Message(), want)
	}
	if st := h.status("chat"); st.Stable != 2 || st.Current != 3 {
		t.Errorf("after the rollback: stable %d current %d, want 2 and 3", st.Stable, st.Current)
	}
}

// What no retry can fix fails before anything is created.
func TestDeployRefusesWhatCannotWork(t *testing.T) {
	h := newHarness(t)
	bad := canary("")
	bad.Replicas.Max = -1
	_, err := h.deploy("chat", h.cluster, bad)
	ae := appError(t, err)
	if ae.Type() != activities.ErrTypeInvalidStep || !strings.Contains(ae.Message(), "spec.image: required") ||
		!strings.Contains(ae.Message(), "spec.replicas.max:") {
		t.Errorf("invalid spec: %s: %s", ae.Type(), ae.Message())
	}

	_, err = h.deploy("chat", "nowhere", canary("vllm:1"))
	ae = appError(t, err)
	if ae.Type() != activities.ErrTypeInvalidStep || !strings.Contains(ae.Message(), `cluster "nowhere" is not registered`) {
		t.Errorf("unregistered cluster: %s: %s", ae.Type(), ae.Message())
	}
	if _, err := h.ec.Status(context.Background(), h.project, "chat"); !errors.Is(err, endpointclient.ErrNotFound) {
		t.Errorf("an endpoint was created: %v", err)
	}
}

// An inference step placed on a cluster that names an endpoint created on
// the local runtime (over REST, without a cluster) cannot give it pod
// settings: its replicas are processes. The step fails naming spec.pod,
// as REST refuses it, rather than the settings being ignored.
func TestDeployRefusesPodSettingsForALocalEndpoint(t *testing.T) {
	h := newHarness(t)
	runtimeQueue := h.queue + "-runtime" // the local runtime's queue, not a cluster's
	w := worker.New(h.c, runtimeQueue, worker.Options{})
	newFakeRuntime().register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	ctx := context.Background()
	if err := h.ec.Create(ctx, h.project, "local", h.queue, runtimeQueue, canary("vllm:1")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.ec.Delete(context.Background(), h.project, "local") })

	spec := canary("vllm:2")
	spec.Pod = &schema.Pod{NodeSelector: map[string]string{"pool": "gpu"}}
	_, err := h.deploy("local", h.cluster, spec)
	ae := appError(t, err)
	if ae.Type() != activities.ErrTypeInvalidStep || !strings.Contains(ae.Message(), "spec.pod: pod settings apply to endpoints on a Kubernetes cluster") {
		t.Errorf("pod settings for a local endpoint: %s: %s", ae.Type(), ae.Message())
	}
	if n := len(h.status("local").Revisions); n != 1 {
		t.Errorf("the refused spec made a revision: %d revisions", n)
	}
}

// models is a registry of one model, "sentiment", whose versions 1 and 2
// resolve; version 2 is deleted between its resolution and the
// reference. It records each reference with whether the endpoint existed
// then.
type models struct {
	mu      sync.Mutex
	ec      *endpointclient.Client
	refs    []string
	existed []bool
}

func (m *models) GetModel(_ context.Context, project, name string) (catalog.Model, error) {
	if name != "sentiment" {
		return catalog.Model{}, catalog.ErrNotFound
	}
	return catalog.Model{Project: project, Name: name, Latest: 2, Aliases: map[string]int{}}, nil
}

func (m *models) GetModelVersion(_ context.Context, project, model, ref string) (catalog.ModelVersion, error) {
	var n int
	if _, err := fmt.Sscan(ref, &n); err != nil || n < 1 || n > 2 {
		return catalog.ModelVersion{}, catalog.ErrNotFound
	}
	return catalog.ModelVersion{Project: project, Model: model, Version: n, Format: "safetensors"}, nil
}

func (m *models) ReferenceModelVersion(ctx context.Context, project, endpoint, model string, version int) error {
	if version == 2 {
		return catalog.ErrNotFound
	}
	_, err := m.ec.Status(ctx, project, endpoint)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refs = append(m.refs, fmt.Sprintf("%s@%s:%d", endpoint, model, version))
	m.existed = append(m.existed, err == nil)
	return nil
}

// An inference step records the endpoint's reference to the model
// version before it creates or updates the endpoint; a version deleted
// meanwhile fails the step, and the endpoint is not updated.
func TestDeployReferencesTheModelVersionFirst(t *testing.T) {
	reg := &models{}
	h := newHarness(t, deploy.WithModels(reg))
	reg.ec = h.ec
	spec := func(ref string) inference.EndpointSpec {
		s := canary("vllm:1")
		s.Model = inference.Model{Ref: ref}
		return s
	}
	if _, err := h.deploy("chat", h.cluster, spec("sentiment@1")); err != nil {
		t.Fatalf("deploy version 1: %v", err)
	}
	if fmt.Sprint(reg.refs, reg.existed) != "[chat@sentiment:1] [false]" {
		t.Fatalf("references %v (endpoint existed %v), want chat@sentiment:1 recorded before the create", reg.refs, reg.existed)
	}
	_, err := h.deploy("chat", h.cluster, spec("sentiment@2"))
	ae := appError(t, err)
	if ae.Type() != activities.ErrTypeInvalidStep || !strings.Contains(ae.Message(), "version 2 of model sentiment was deleted while it was being resolved") {
		t.Fatalf("deleted version: %s: %s", ae.Type(), ae.Message())
	}
	if st := h.status("chat"); len(st.Revisions) != 1 {
		t.Fatalf("the endpoint has %d revisions, want 1", len(st.Revisions))
	}
}
