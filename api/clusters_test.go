package api

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
)

func TestRegisterCluster(t *testing.T) {
	h := newHarness(t)
	r := h.do("POST", "/v1/clusters", h.admin, map[string]any{"name": "gpu-east", "description": "A100 pool", "labels": map[string]string{"region": "east"}})
	wantStatus(t, r, http.StatusCreated)
	if r.Header.Get("Location") != "/v1/clusters/gpu-east" {
		t.Errorf("Location %q", r.Header.Get("Location"))
	}
	var c gen.Cluster
	r.json(t, &c)
	if c.Name != "gpu-east" || c.TaskQueue != "atelier-k8s-gpu-east" || c.Labels["region"] != "east" || deref(c.Description) != "A100 pool" || c.Online || c.LastSeenAt != nil || c.Capacity != nil {
		t.Fatalf("%+v", c)
	}

	// Registering again updates: 200; absent fields keep their values.
	r = h.do("POST", "/v1/clusters", h.admin, map[string]any{"name": "gpu-east", "labels": map[string]string{"region": "east", "atelier.dev/tier": "gpu"}})
	wantStatus(t, r, http.StatusOK)
	r.json(t, &c)
	if len(c.Labels) != 2 || deref(c.Description) != "A100 pool" {
		t.Fatalf("%+v", c)
	}
	r = h.do("POST", "/v1/clusters", h.admin, map[string]any{"name": "gpu-east"})
	wantStatus(t, r, http.StatusOK)
	r.json(t, &c)
	if len(c.Labels) != 2 {
		t.Fatalf("labels dropped: %+v", c)
	}
	r = h.do("POST", "/v1/clusters", h.admin, map[string]any{"name": "gpu-east", "labels": map[string]string{}})
	var cleared gen.Cluster // decoding into c would merge into its label map
	r.json(t, &cleared)
	if len(cleared.Labels) != 0 {
		t.Fatalf("labels not cleared: %+v", cleared)
	}

	// Writes are admin-only.
	wantProblem(t, h.do("POST", "/v1/clusters", h.editor, map[string]any{"name": "mine"}), http.StatusForbidden, "forbidden")
	wantProblem(t, h.do("POST", "/v1/clusters", "", map[string]any{"name": "mine"}), http.StatusUnauthorized, "unauthenticated")
}

func TestRegisterClusterBadRequests(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		name, body string
		paths      []string
	}{
		{"bad name", `{"name": "Gpu_East"}`, []string{"name"}},
		{"name too long", `{"name": "` + "a" + strings.Repeat("b", 63) + `"}`, []string{"name"}},
		{"missing name", `{"labels": {}}`, []string{"name"}},
		{"unknown field", `{"name": "a", "taskQueue": "elsewhere"}`, []string{"taskQueue"}},
		{"bad label value", `{"name": "a", "labels": {"tier": "gpu pool"}}`, []string{"labels.tier"}},
		{"label value not a string", `{"name": "a", "labels": {"gpus": 8}}`, []string{"labels.gpus"}},
		{"bad label keys", `{"name": "a", "labels": {"-x": "1", "Bad_Prefix/x": "2", "ok.example.com/fine": "3"}}`, []string{"labels.-x", "labels.Bad_Prefix/x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := wantProblem(t, h.do("POST", "/v1/clusters", h.admin, c.body), http.StatusBadRequest, "invalid-request")
			if got := sorted(errorPaths(p)); strings.Join(got, ",") != strings.Join(c.paths, ",") {
				t.Errorf("error paths %v, want %v (%s)", got, c.paths, *p.Detail)
			}
		})
	}
	if len(h.cat.clusters) != 0 {
		t.Fatalf("a bad request registered %v", h.cat.clusters)
	}
}

func TestListAndGetClusters(t *testing.T) {
	h := newHarness(t)
	seen := t0 // the harness clock starts just after t0: online
	stale := t0.Add(-10 * time.Minute)
	capacity := &catalog.ClusterCapacity{
		GPUs:        map[string]catalog.ResourceAmount{"NVIDIA-A100-SXM4-80GB": {Total: 16, Free: 9}},
		CPUMillis:   catalog.ResourceAmount{Total: 128000, Free: 64000},
		MemoryBytes: catalog.ResourceAmount{Total: 1 << 40, Free: 1 << 39},
		Nodes:       2,
	}
	h.cat.clusters["east"] = catalog.Cluster{Name: "east", Labels: map[string]string{"region": "east"}, TaskQueue: "atelier-k8s-east", CreatedAt: t0, UpdatedAt: t0, LastSeenAt: &seen, Capacity: capacity}
	h.cat.clusters["west"] = catalog.Cluster{Name: "west", TaskQueue: "atelier-k8s-west", CreatedAt: t0, UpdatedAt: t0, LastSeenAt: &stale}
	h.cat.clusters["new"] = catalog.Cluster{Name: "new", TaskQueue: "atelier-k8s-new", CreatedAt: t0, UpdatedAt: t0}

	// Any valid token may read: clusters are shared infrastructure.
	for _, tok := range []string{h.admin, h.viewer, h.betaEditor} {
		var l gen.ClusterList
		r := h.do("GET", "/v1/clusters", tok, nil)
		wantStatus(t, r, http.StatusOK)
		r.json(t, &l)
		if len(l.Clusters) != 3 || l.Clusters[0].Name != "east" || !l.Clusters[0].Online || l.Clusters[1].Online || l.Clusters[2].Online {
			t.Fatalf("%+v", l)
		}
	}

	var c gen.Cluster
	r := h.do("GET", "/v1/clusters/east", h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	r.json(t, &c)
	if !c.Online || c.LastSeenAt == nil || !c.LastSeenAt.Equal(seen) || c.Capacity == nil || c.Capacity.Gpus["NVIDIA-A100-SXM4-80GB"].Free != 9 || c.Capacity.Nodes != 2 {
		t.Fatalf("%+v", c)
	}
	if !strings.Contains(string(r.body), `"memoryBytes":{"total":1099511627776,"free":549755813888}`) {
		t.Errorf("capacity JSON: %s", r.body)
	}
	var fresh gen.Cluster
	h.do("GET", "/v1/clusters/new", h.viewer, nil).json(t, &fresh)
	if fresh.Online || fresh.LastSeenAt != nil || fresh.Capacity != nil || fresh.Labels == nil || len(fresh.Labels) != 0 {
		t.Fatalf("%+v", fresh)
	}
	wantProblem(t, h.do("GET", "/v1/clusters/north", h.viewer, nil), http.StatusNotFound, "not-found")
	p := wantProblem(t, h.do("GET", "/v1/clusters/North", h.viewer, nil), http.StatusBadRequest, "invalid-request")
	if got := errorPaths(p); len(got) != 1 || got[0] != "path.cluster" {
		t.Errorf("paths %v", got)
	}
	wantProblem(t, h.do("GET", "/v1/clusters", "", nil), http.StatusUnauthorized, "unauthenticated")
}

func TestListClustersEmpty(t *testing.T) {
	h := newHarness(t)
	r := h.do("GET", "/v1/clusters", h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	if strings.TrimSpace(string(r.body)) != `{"clusters":[]}` {
		t.Fatalf("%s", r.body)
	}
}

func TestDeleteCluster(t *testing.T) {
	h := newHarness(t)
	wantStatus(t, h.do("POST", "/v1/clusters", h.admin, map[string]any{"name": "east"}), http.StatusCreated)
	wantProblem(t, h.do("DELETE", "/v1/clusters/east", h.editor, nil), http.StatusForbidden, "forbidden")
	wantStatus(t, h.do("DELETE", "/v1/clusters/east", h.admin, nil), http.StatusNoContent)
	wantProblem(t, h.do("DELETE", "/v1/clusters/east", h.admin, nil), http.StatusNotFound, "not-found")
	wantProblem(t, h.do("GET", "/v1/clusters/east", h.admin, nil), http.StatusNotFound, "not-found")
}

// rayJSON is a minimal valid pipeline with a ray step.
const rayJSON = `{
  "steps": [
    {"name": "train", "kind": "ray", "ray": {"entrypoint": "python train.py", "image": "rayproject/ray:2.9.3-py310"}},
    {"name": "etl", "kind": "spark", "spark": {"type": "Python", "image": "apache/spark:3.5.1", "mainApplicationFile": "local:///app/etl.py"}}
  ]
}`

// inferenceJSON is a minimal valid pipeline with an inference step.
const inferenceJSON = `{
  "steps": [
    {"name": "serve", "kind": "inference", "inference": {"endpoint": "chat", "cluster": "east",
      "spec": {"backend": "vllm", "model": {"name": "tiny"}, "image": "vllm/vllm-openai:v0.9.1"}}}
  ]
}`

// TestStepKindsFollowTheRegistry: ray and spark steps are accepted
// exactly when a cluster is registered, without restarting the gateway;
// inference steps always are (without a cluster their endpoint runs on
// the local runtime).
func TestStepKindsFollowTheRegistry(t *testing.T) {
	h := newHarness(t)
	path := "/v1/projects/alpha/pipelines/train/versions"
	p := wantProblem(t, h.do("POST", path, h.editor, rayJSON), http.StatusUnprocessableEntity, "invalid-spec")
	if got := strings.Join(errorPaths(p), " "); !strings.Contains(got, "steps[0].kind") || !strings.Contains(got, "steps[1].kind") {
		t.Fatalf("paths %s: %s", got, *p.Detail)
	}
	if !strings.Contains(*p.Detail, "Kubernetes cluster") {
		t.Errorf("detail %q does not say a cluster is needed", *p.Detail)
	}
	local := strings.Replace(inferenceJSON, `"cluster": "east",`, "", 1)
	wantStatus(t, h.do("POST", "/v1/projects/alpha/pipelines/local-serve/versions", h.editor, local), http.StatusCreated)

	wantStatus(t, h.do("POST", "/v1/clusters", h.admin, map[string]any{"name": "east"}), http.StatusCreated)
	wantStatus(t, h.do("POST", path, h.editor, rayJSON), http.StatusCreated)

	wantStatus(t, h.do("POST", "/v1/projects/alpha/pipelines/serve/versions", h.editor, inferenceJSON), http.StatusCreated)
	// An inference step's problems are named by their paths, the
	// endpoint spec's included.
	bad := `{"steps": [{"name": "serve", "kind": "inference", "inference": {"endpoint": "Chat", "spec": {"backend": "tgi", "image": "x"}}}]}`
	p = wantProblem(t, h.do("POST", path, h.editor, bad), http.StatusUnprocessableEntity, "invalid-spec")
	if got, want := strings.Join(errorPaths(p), " "), "steps[0].inference.endpoint steps[0].inference.spec.backend"; got != want {
		t.Errorf("paths %q, want %q", got, want)
	}
	// Kinds no runtime runs stay rejected; approvals need no runtime.
	child := `{"steps": [{"name": "child", "kind": "pipeline"}]}`
	wantProblem(t, h.do("POST", path, h.editor, child), http.StatusUnprocessableEntity, "invalid-spec")
	approval := `{"steps": [{"name": "wait", "kind": "approval"}]}`
	wantStatus(t, h.do("POST", path, h.editor, approval), http.StatusCreated)

	// Deleting the last cluster closes the door again.
	wantStatus(t, h.do("DELETE", "/v1/clusters/east", h.admin, nil), http.StatusNoContent)
	wantProblem(t, h.do("POST", "/v1/projects/alpha/pipelines/other/versions", h.editor, rayJSON), http.StatusUnprocessableEntity, "invalid-spec")

	// A registry failure is an internal error, not a spec problem.
	h.cat.listClustersErr = errors.New("connection refused")
	wantProblem(t, h.do("POST", path, h.editor, specJSON), http.StatusInternalServerError, "internal")
}
