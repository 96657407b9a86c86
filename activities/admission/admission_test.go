package admission

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/internal/catalog"
)

type fakeCatalog struct {
	policies []catalog.GPUPolicy
	cluster  *catalog.Cluster
	lists    int
}

func (f *fakeCatalog) ListGPUPolicies(context.Context) ([]catalog.GPUPolicy, error) {
	f.lists++
	return f.policies, nil
}

func (f *fakeCatalog) EndedRuns(_ context.Context, ids []string) ([]string, error) {
	var out []string
	for _, id := range ids {
		if id == "ended" {
			out = append(out, id)
		}
	}
	return out, nil
}

func (f *fakeCatalog) GetCluster(_ context.Context, name string) (catalog.Cluster, error) {
	if f.cluster == nil || f.cluster.Name != name {
		return catalog.Cluster{}, catalog.ErrNotFound
	}
	return *f.cluster, nil
}

type fakeStarter struct {
	id     string
	signal any
	input  any
}

func (f *fakeStarter) SignalWithStartWorkflow(_ context.Context, id, _ string, arg any, _ client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	f.id, f.signal, f.input = id, arg, args[0]
	return nil, nil
}

func request(typ gpu.Resource) activities.SubmitWorkloadRequest {
	return activities.SubmitWorkloadRequest{Cluster: "east", Run: "r1", Step: "train", Workload: gpu.Workload{
		ID: "r1/train", Project: "vision", PodSets: []gpu.PodSet{{Name: "step", Count: 1, Per: 2, Resource: typ}}}}
}

func invalidStep(t *testing.T, err error, want string) {
	t.Helper()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != activities.ErrTypeInvalidStep || !app.NonRetryable() || !strings.Contains(app.Message(), want) {
		t.Fatalf("err = %v, want a non-retryable InvalidStep containing %q", err, want)
	}
}

func TestSubmit(t *testing.T) {
	ctx := context.Background()
	cat := &fakeCatalog{}
	st := &fakeStarter{}
	a := New(cat, st, "atelier", WithMinRuntime(time.Minute))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return now }

	// No policy anywhere: admission is off, nothing is queued.
	res, err := a.Submit(ctx, request("L4"))
	if err != nil || res.Queued || st.id != "" {
		t.Fatalf("admission off: %+v %v (signalled %q)", res, err, st.id)
	}

	// Policies are cached for PolicyCacheTTL.
	cat.policies = []catalog.GPUPolicy{{ProjectPolicy: gpu.ProjectPolicy{Name: "vision", MaxPriority: 10, Quotas: []gpu.Quota{{Resource: "L4", Nominal: 4}}}}}
	if res, _ := a.Submit(ctx, request("L4")); res.Queued {
		t.Fatal("a policy newer than the cache was used before PolicyCacheTTL")
	}
	now = now.Add(PolicyCacheTTL)
	res, err = a.Submit(ctx, request("L4"))
	if err != nil || !res.Queued {
		t.Fatalf("queued: %+v %v", res, err)
	}
	want := activities.AdmissionRequest{Op: activities.AdmissionSubmit, Run: "r1", Step: "train", Workload: request("L4").Workload}
	if diff := cmp.Diff(want, st.signal); diff != "" || st.id != activities.AdmissionWorkflowID("east") {
		t.Errorf("signal-with-start %s (-want +got):\n%s", st.id, diff)
	}
	if diff := cmp.Diff(activities.AdmissionInput{Cluster: "east"}, st.input); diff != "" {
		t.Errorf("workflow input (-want +got):\n%s", diff)
	}

	// A gang without a GPU type takes the cluster's only type, and must
	// choose when there are several.
	cat.cluster = &catalog.Cluster{Name: "east", Capacity: &catalog.ClusterCapacity{GPUNodes: []gpu.Node{{Name: "n1", GPUType: "L4", GPUs: 1}}}}
	res, err = a.Submit(ctx, request(""))
	if err != nil || res.Workload.PodSets[0].Resource != "L4" {
		t.Fatalf("type resolved: %+v %v", res, err)
	}
	cat.cluster.Capacity.GPUNodes = append(cat.cluster.Capacity.GPUNodes, gpu.Node{Name: "n2", GPUType: "H100", GPUs: 8})
	_, err = a.Submit(ctx, request(""))
	invalidStep(t, err, "cluster east has several GPU types (H100, L4): set resources.gpuType")

	// Refusals say what to change.
	req := request("L4")
	req.Workload.Project = "nlp"
	_, err = a.Submit(ctx, req)
	invalidStep(t, err, "project nlp has no GPU policy, so no GPU quota")
	req = request("L4")
	prio := 50
	req.Workload.Priority = &prio
	_, err = a.Submit(ctx, req)
	invalidStep(t, err, "GPU admission refuses step train")

	// The snapshot carries the minimum runtime.
	snap, err := a.LoadSnapshot(ctx, activities.AdmissionSnapshotRequest{Cluster: "east", Runs: []string{"r1", "ended"}})
	if err != nil || snap.Policy.MinRuntime != time.Minute || len(snap.Inventory.Nodes) != 2 || !cmp.Equal(snap.EndedRuns, []string{"ended"}) {
		t.Errorf("snapshot %+v %v", snap, err)
	}
}

// A batch reads the cluster and the policies once, answers each request on
// its own (a refusal does not fail the others), and queues the accepted
// ones in AdmissionBatch signals of at most MaxBatchSignal submits.
func TestSubmitBatch(t *testing.T) {
	ctx := context.Background()
	cat := &fakeCatalog{policies: []catalog.GPUPolicy{{ProjectPolicy: gpu.ProjectPolicy{Name: "vision", Quotas: []gpu.Quota{{Resource: "L4", Nominal: 4}}}}},
		cluster: &catalog.Cluster{Name: "east", Capacity: &catalog.ClusterCapacity{GPUNodes: []gpu.Node{{Name: "n1", GPUType: "L4", GPUs: 1}}}}}
	var signals []activities.AdmissionRequest
	st := &recordingStarter{signals: &signals}
	a := New(cat, st, "atelier")
	reqs := make([]activities.SubmitWorkloadRequest, MaxBatchSignal+2)
	for i := range reqs {
		reqs[i] = request("")
		reqs[i].Workload.ID = "r1/train/" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
	}
	reqs[1].Workload.Project = "nlp" // refused
	res, err := a.SubmitBatch(ctx, activities.SubmitWorkloadsRequest{Cluster: "east", Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != len(reqs) {
		t.Fatalf("%d results for %d requests", len(res.Results), len(reqs))
	}
	if r := res.Results[1]; r.Queued || !strings.Contains(r.Refused, "project nlp has no GPU policy") {
		t.Errorf("refused request: %+v", r)
	}
	if r := res.Results[0]; !r.Queued || r.Refused != "" || r.Workload.PodSets[0].Resource != "L4" {
		t.Errorf("accepted request: %+v", r)
	}
	if len(signals) != 2 || signals[0].Op != activities.AdmissionBatch || len(signals[0].Requests) != MaxBatchSignal || len(signals[1].Requests) != 1 {
		t.Fatalf("signals: %d, want two batches of %d and 1", len(signals), MaxBatchSignal)
	}
	if got := signals[0].Requests[1].Workload.ID; got != reqs[2].Workload.ID {
		t.Errorf("the refused workload was queued (second submit is %s)", got)
	}
	if cat.lists != 1 {
		t.Errorf("policies read %d times for one batch", cat.lists)
	}

	// On a cluster whose worker submits to Kueue, Kueue admits the kinds
	// it integrates with; Spark stays with Atelier.
	signals = nil
	cat.cluster.Capacity.KueueQueue = "team-a"
	spark := request("L4")
	spark.Kind = "spark"
	res, err = a.SubmitBatch(ctx, activities.SubmitWorkloadsRequest{Cluster: "east", Requests: []activities.SubmitWorkloadRequest{request("L4"), spark}})
	if err != nil || res.Results[0].KueueQueue != "team-a" || res.Results[0].Queued || !res.Results[1].Queued {
		t.Fatalf("kueue: %+v %v", res, err)
	}
	if len(signals) != 1 || len(signals[0].Requests) != 1 {
		t.Errorf("signals with Kueue: %+v", signals)
	}
}

type recordingStarter struct {
	signals *[]activities.AdmissionRequest
}

func (f *recordingStarter) SignalWithStartWorkflow(_ context.Context, _, _ string, arg any, _ client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	*f.signals = append(*f.signals, arg.(activities.AdmissionRequest))
	return nil, nil
}
