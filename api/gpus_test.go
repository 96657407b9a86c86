package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/internal/catalog"
)

func gpuCluster(name string, nodes ...gpu.Node) catalog.Cluster {
	return catalog.Cluster{Name: name, TaskQueue: "atelier-k8s-" + name, Capacity: &catalog.ClusterCapacity{GPUNodes: nodes}}
}

func TestGPUPolicyLifecycle(t *testing.T) {
	h := newHarness(t)
	h.cat.clusters["east"] = gpuCluster("east",
		gpu.Node{Name: "h1", GPUType: "NVIDIA-H100-80GB-HBM3", GPUs: 8, Ready: true},
		gpu.Node{Name: "h2", GPUType: "NVIDIA-H100-80GB-HBM3", GPUs: 8, Ready: true})
	const path = "/v1/projects/alpha/gpu-policy"
	wantProblem(t, h.do("GET", path, h.viewer, nil), http.StatusNotFound, "not-found")

	body := map[string]any{"cohort": "research", "weight": 2, "defaultPriority": 10, "maxPriority": 100,
		"quotas": []map[string]any{
			{"resource": "NVIDIA-H100-80GB-HBM3", "nominal": 16, "borrowingLimit": 4, "lendingLimit": -1},
			{"resource": "NVIDIA-L4", "nominal": 2},
		}}
	// Only an admin sets quotas.
	wantProblem(t, h.do("PUT", path, h.editor, body), http.StatusForbidden, "forbidden")
	r := h.do("PUT", path, h.admin, body)
	wantStatus(t, r, http.StatusOK)
	var got gen.GPUPolicy
	r.json(t, &got)
	want := gen.GPUPolicy{Project: "alpha", Cohort: ptr("research"), Weight: ptr[float32](2), DefaultPriority: ptr(10), MinPriority: ptr(0), MaxPriority: ptr(100),
		Quotas: []gen.GPUQuota{
			{Resource: "NVIDIA-H100-80GB-HBM3", Nominal: 16, BorrowingLimit: ptr(4), LendingLimit: ptr(-1)},
			{Resource: "NVIDIA-L4", Nominal: 2},
		},
		UpdatedAt: got.UpdatedAt,
		// Accepted, but said: no registered cluster has L4s.
		Warnings: &[]string{"quota of 2 NVIDIA-L4 is above the 0 the registered clusters offer: workloads beyond that wait for capacity"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("put (-want +got):\n%s", diff)
	}
	// Members of the project read it; other projects do not see it.
	r = h.do("GET", path, h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	var read gen.GPUPolicy
	r.json(t, &read)
	want.Warnings = nil
	if diff := cmp.Diff(want, read); diff != "" {
		t.Errorf("get (-want +got):\n%s", diff)
	}
	wantStatus(t, h.do("GET", path, h.betaEditor, nil), http.StatusNotFound)

	wantProblem(t, h.do("PUT", "/v1/projects/ghost/gpu-policy", h.admin, body), http.StatusNotFound, "not-found")
	wantStatus(t, h.do("DELETE", path, h.editor, nil), http.StatusForbidden)
	wantStatus(t, h.do("DELETE", path, h.admin, nil), http.StatusNoContent)
	wantProblem(t, h.do("DELETE", path, h.admin, nil), http.StatusNotFound, "not-found")
}

func TestGPUPolicyReportsEveryProblem(t *testing.T) {
	h := newHarness(t)
	p := wantProblem(t, h.do("PUT", "/v1/projects/alpha/gpu-policy", h.admin, map[string]any{
		"minPriority": 5, "maxPriority": 1,
		"quotas": []map[string]any{{"resource": "", "nominal": -3}, {"resource": "NVIDIA-L4", "nominal": 1, "lendingLimit": 2}},
	}), http.StatusUnprocessableEntity, "invalid-gpu-policy")
	if diff := cmp.Diff([]string{"minPriority", "quotas[0].resource", "quotas[0].nominal", "quotas[1].lendingLimit"}, errorPaths(p)); diff != "" {
		t.Errorf("problem paths (-want +got):\n%s", diff)
	}
	// Unknown fields are refused by the spec, with their path.
	p = wantProblem(t, h.do("PUT", "/v1/projects/alpha/gpu-policy", h.admin, map[string]any{"quota": []any{}}), http.StatusBadRequest, "invalid-request")
	if diff := cmp.Diff([]string{"quota"}, errorPaths(p)); diff != "" {
		t.Errorf("unknown field (-want +got):\n%s", diff)
	}
}

func TestListGPUs(t *testing.T) {
	h := newHarness(t)
	h.cat.clusters["east"] = gpuCluster("east",
		gpu.Node{Name: "h1", GPUType: "NVIDIA-H100-80GB-HBM3", GPUMemoryMiB: 81559, GPUs: 8, GPUsInUse: 2, Ready: true},
		gpu.Node{Name: "h2", GPUType: "NVIDIA-H100-80GB-HBM3", GPUMemoryMiB: 81559, GPUs: 8, Ready: false}, // not counted
		gpu.Node{Name: "m1", MIG: []gpu.MIGSlices{{Profile: "nvidia.com/mig-1g.10gb", Allocatable: 7, InUse: 1}}, Ready: true})
	h.cat.clusters["west"] = gpuCluster("west",
		gpu.Node{Name: "h3", GPUType: "NVIDIA-H100-80GB-HBM3", GPUMemoryMiB: 81559, GPUs: 4, Ready: true})
	h.cat.clusters["new"] = catalog.Cluster{Name: "new", TaskQueue: "atelier-k8s-new"} // never reported
	r := h.do("GET", "/v1/gpus", h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	var got gen.GPUSummary
	r.json(t, &got)
	want := gen.GPUSummary{Gpus: []gen.GPUTypeSummary{
		{Resource: "NVIDIA-H100-80GB-HBM3", MemoryMiB: ptr[int64](81559), Clusters: []string{"east", "west"}, Nodes: 2, Allocatable: 12, InUse: 2},
		{Resource: "nvidia.com/mig-1g.10gb", Clusters: []string{"east"}, Nodes: 1, Allocatable: 7, InUse: 1},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestClusterQueueHidesOtherProjects(t *testing.T) {
	h := newHarness(t)
	h.cat.clusters["east"] = gpuCluster("east")
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	h.eng.queue = activities.AdmissionQueue{DecidedAt: &at,
		Pending: []activities.QueueEntry{
			{Workload: "r1/train", Project: "alpha", Run: "r1", Step: "train", Submitted: at, Position: 1, Reason: "Quota", Message: "quota: ...",
				GPUs: []gpu.Amount{{Resource: "NVIDIA-L4", Units: 1}}},
			{Workload: "r2/fit", Project: "beta", Run: "r2", Step: "fit", Submitted: at, Position: 2, Reason: "Capacity", Message: "capacity: ...",
				GPUs: []gpu.Amount{{Resource: "NVIDIA-L4", Units: 4}}},
		},
		Running: []activities.QueueEntry{{Workload: "r0/x", Project: "beta", Run: "r0", Step: "x", Submitted: at, Admitted: &at, Nodes: []string{"n1"}}},
	}
	r := h.do("GET", "/v1/clusters/east/queue", h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	var got gen.AdmissionQueue
	r.json(t, &got)
	want := gen.AdmissionQueue{Cluster: "east", DecidedAt: &at,
		Pending: []gen.QueueEntry{
			{Workload: ptr("r1/train"), Project: ptr("alpha"), Run: ptr("r1"), Step: ptr("train"), Submitted: at, Position: ptr(1), Priority: ptr(0), Reason: ptr("Quota"), Message: ptr("quota: ..."),
				Gpus: []gen.GPUAmount{{Resource: "NVIDIA-L4", Units: 1}}},
			// Another project's: its place and size, not its names.
			{Submitted: at, Position: ptr(2), Priority: ptr(0), Reason: ptr("Capacity"), Gpus: []gen.GPUAmount{{Resource: "NVIDIA-L4", Units: 4}}},
		},
		Running: []gen.QueueEntry{{Submitted: at, Priority: ptr(0), Admitted: &at, Gpus: []gen.GPUAmount{}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("viewer of alpha (-want +got):\n%s", diff)
	}
	// An admin sees every name.
	r = h.do("GET", "/v1/clusters/east/queue", h.admin, nil)
	r.json(t, &got)
	if deref(got.Pending[1].Run) != "r2" || deref(got.Running[0].Project) != "beta" {
		t.Errorf("admin view %+v", got)
	}
	wantProblem(t, h.do("GET", "/v1/clusters/nowhere/queue", h.viewer, nil), http.StatusNotFound, "not-found")
}
