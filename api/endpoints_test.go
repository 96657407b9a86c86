package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/client/endpointclient"
	"github.com/atelier-ml/atelier/inference"
)

// fakeEndpoints keeps endpoints in memory with the workflow's revision
// rules (inference.NextRevision); busy makes updates refused as during a
// rollout.
type fakeEndpoints struct {
	mu     sync.Mutex
	eps    map[string]*activities.EndpointStatus
	queues map[string][2]string
	busy   bool
}

func newFakeEndpoints() *fakeEndpoints {
	return &fakeEndpoints{eps: map[string]*activities.EndpointStatus{}, queues: map[string][2]string{}}
}

func (f *fakeEndpoints) Create(_ context.Context, project, name, wq, aq string, spec inference.EndpointSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := project + "/" + name
	if _, ok := f.eps[k]; ok {
		return endpointclient.ErrExists
	}
	rev, _, err := inference.NextRevision(nil, spec, t0)
	if err != nil {
		return err
	}
	f.eps[k] = &activities.EndpointStatus{Project: project, Name: name, TaskQueue: aq,
		EndpointState: activities.EndpointState{Revisions: []inference.Revision{rev}, Current: 1}}
	f.queues[k] = [2]string{wq, aq}
	return nil
}

func (f *fakeEndpoints) Status(_ context.Context, project, name string) (activities.EndpointStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.eps[project+"/"+name]
	if !ok {
		return activities.EndpointStatus{}, endpointclient.ErrNotFound
	}
	return *st, nil
}

func (f *fakeEndpoints) Update(_ context.Context, project, name string, spec inference.EndpointSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.eps[project+"/"+name]
	if !ok {
		return endpointclient.ErrNotFound
	}
	if f.busy {
		return &endpointclient.RejectedError{Message: "revision 1 is still rolling out: promote or abort it before changing what replicas run"}
	}
	rev, made, err := inference.NextRevision(&st.Revisions[len(st.Revisions)-1], spec, t0.Add(time.Minute))
	if err != nil {
		return err
	}
	if made {
		st.Revisions = append(st.Revisions, rev)
		st.Current = rev.Number
	}
	return nil
}

func (f *fakeEndpoints) Rollback(context.Context, string, string, int) error { return nil }
func (f *fakeEndpoints) Command(context.Context, string, string, inference.Command) error {
	return &endpointclient.RejectedError{Message: "no rollout is in progress"}
}

func (f *fakeEndpoints) Delete(_ context.Context, project, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.eps[project+"/"+name]; !ok {
		return endpointclient.ErrNotFound
	}
	delete(f.eps, project+"/"+name)
	return nil
}

func (f *fakeEndpoints) List(_ context.Context, project string) ([]endpointclient.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []endpointclient.Summary
	for _, st := range f.eps {
		if st.Project == project {
			out = append(out, endpointclient.Summary{Name: st.Name, CreatedAt: t0})
		}
	}
	slices.SortFunc(out, func(a, b endpointclient.Summary) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (f *fakeEndpoints) UIURL(project, name string) string {
	return "http://ui/" + project + "/" + name
}

func endpointBody(name, cluster string, spec map[string]any) map[string]any {
	return map[string]any{"name": name, "cluster": cluster, "spec": spec}
}

func vllmSpec(image string) map[string]any {
	return map[string]any{"backend": "vllm", "model": map[string]any{"name": "tiny"}, "image": image,
		"resources": map[string]any{"gpuType": "NVIDIA-L4", "gpus": 1}, "replicas": map[string]any{"min": 1, "max": 3}}
}

func TestEndpointLifecycle(t *testing.T) {
	eps := newFakeEndpoints()
	h := newHarness(t, WithEndpoints(eps), WithTaskQueue("atelier-local"))
	h.cat.clusters["east"] = gpuCluster("east")
	const path = "/v1/projects/alpha/endpoints"

	// Every problem at once, with paths under spec.
	bad := vllmSpec("")
	bad["replicas"] = map[string]any{"min": 4, "max": 2}
	p := wantProblem(t, h.do("POST", path, h.editor, endpointBody("chat", "east", bad)), http.StatusUnprocessableEntity, "invalid-endpoint-spec")
	if paths := errorPaths(p); !slices.Contains(paths, "spec.image") || !slices.Contains(paths, "spec.replicas.max") {
		t.Fatalf("problems %v, want spec.image and spec.replicas.max", paths)
	}
	// A typo is named, not ignored.
	typo := vllmSpec("vllm/vllm-openai:v0.9.1")
	typo["replica"] = 3
	p = wantProblem(t, h.do("POST", path, h.editor, endpointBody("chat", "east", typo)), http.StatusUnprocessableEntity, "invalid-endpoint-spec")
	if p.Detail == nil || !strings.Contains(*p.Detail, `unknown field "replica"`) {
		t.Fatalf("typo problem %+v", p)
	}
	// Values that do not decode are each named by their path, all at once.
	undecodable := vllmSpec("vllm/vllm-openai:v0.9.1")
	undecodable["autoscaling"] = map[string]any{"stableWindow": "soon"}
	undecodable["rollout"] = map[string]any{"strategy": "canary", "canary": map[string]any{"steps": []any{map[string]any{"weight": 10, "pause": "1m"}, map[string]any{"weight": "half", "pause": "later"}}}}
	undecodable["replica"] = 3
	p = wantProblem(t, h.do("POST", path, h.editor, endpointBody("chat", "east", undecodable)), http.StatusUnprocessableEntity, "invalid-endpoint-spec")
	want := []string{"spec.autoscaling.stableWindow", "spec.replica", "spec.rollout.canary.steps[1].pause", "spec.rollout.canary.steps[1].weight"}
	if got := errorPaths(p); !slices.Equal(got, want) {
		t.Fatalf("decode problems at %v, want %v (%+v)", got, want, p.Errors)
	}
	wantProblem(t, h.do("POST", path, h.editor, endpointBody("chat", "west", vllmSpec("vllm/vllm-openai:v0.9.1"))), http.StatusUnprocessableEntity, "invalid-endpoint-spec")
	// Viewers read, editors write; other projects see nothing.
	wantProblem(t, h.do("POST", path, h.viewer, endpointBody("chat", "east", vllmSpec("vllm/vllm-openai:v0.9.1"))), http.StatusForbidden, "forbidden")

	r := h.do("POST", path, h.editor, endpointBody("chat", "east", vllmSpec("vllm/vllm-openai:v0.9.1")))
	wantStatus(t, r, http.StatusCreated)
	var ep gen.Endpoint
	r.json(t, &ep)
	if ep.Name != "chat" || ep.Current != 1 || len(ep.Revisions) != 1 || ep.TemporalUI == nil {
		t.Fatalf("created %+v", ep)
	}
	if q := eps.queues["alpha/chat"]; q != [2]string{"atelier-local", "atelier-k8s-east"} {
		t.Fatalf("queues %v: the workflow runs on the local queue, its activities on the cluster's", q)
	}
	wantProblem(t, h.do("POST", path, h.editor, endpointBody("chat", "east", vllmSpec("vllm/vllm-openai:v0.9.1"))), http.StatusConflict, "already-exists")
	wantProblem(t, h.do("GET", path+"/chat", h.betaEditor, nil), http.StatusNotFound, "not-found")

	var list gen.EndpointList
	r = h.do("GET", path, h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	r.json(t, &list)
	if len(list.Items) != 1 || list.Items[0].Name != "chat" {
		t.Fatalf("list %+v", list)
	}

	r = h.do("PUT", path+"/chat", h.editor, vllmSpec("vllm/vllm-openai:v0.9.2"))
	wantStatus(t, r, http.StatusOK)
	r.json(t, &ep)
	if ep.Current != 2 {
		t.Fatalf("after update: %+v", ep)
	}
	eps.busy = true
	wantProblem(t, h.do("PUT", path+"/chat", h.editor, vllmSpec("vllm/vllm-openai:v0.9.3")), http.StatusConflict, "endpoint-conflict")
	wantProblem(t, h.do("POST", path+"/chat/promote", h.editor, nil), http.StatusConflict, "endpoint-conflict")
	wantProblem(t, h.do("GET", path+"/nope", h.viewer, nil), http.StatusNotFound, "not-found")

	wantStatus(t, h.do("DELETE", path+"/chat", h.editor, nil), http.StatusAccepted)
	wantProblem(t, h.do("GET", path+"/chat", h.viewer, nil), http.StatusNotFound, "not-found")
}

func TestEndpointOnTheLocalRuntime(t *testing.T) {
	eps := newFakeEndpoints()
	h := newHarness(t, WithEndpoints(eps), WithTaskQueue("atelier-local"))
	const path = "/v1/projects/alpha/endpoints"
	spec := vllmSpec("vllm/vllm-openai:v0.9.1")

	// No cluster: the workflow and its activities both on the local
	// worker's queue, where that worker runs the replicas.
	wantStatus(t, h.do("POST", path, h.editor, map[string]any{"name": "chat", "spec": spec}), http.StatusCreated)
	if q := eps.queues["alpha/chat"]; q != [2]string{"atelier-local", "atelier-local"} {
		t.Fatalf("queues %v, want the local queue for both", q)
	}
	// An empty cluster means the same.
	wantStatus(t, h.do("POST", path, h.editor, endpointBody("chat2", "", spec)), http.StatusCreated)
	if q := eps.queues["alpha/chat2"]; q != [2]string{"atelier-local", "atelier-local"} {
		t.Fatalf("queues %v, want the local queue for both", q)
	}
	// A cluster that is not registered is still refused, by path.
	p := wantProblem(t, h.do("POST", path, h.editor, endpointBody("chat3", "west", spec)), http.StatusUnprocessableEntity, "invalid-endpoint-spec")
	if paths := errorPaths(p); !slices.Equal(paths, []string{"cluster"}) {
		t.Fatalf("problem paths %v, want [cluster]", paths)
	}
	if _, ok := eps.queues["alpha/chat3"]; ok {
		t.Fatal("an endpoint on an unknown cluster was created")
	}
	// Pod settings need a cluster: on the local runtime they are refused
	// (with the spec's other problems), not ignored.
	withPod := vllmSpec("")
	withPod["pod"] = map[string]any{"tolerations": []any{map[string]any{"key": "gpu", "operator": "Exists"}}}
	p = wantProblem(t, h.do("POST", path, h.editor, endpointBody("chat4", "", withPod)), http.StatusUnprocessableEntity, "invalid-endpoint-spec")
	if paths := errorPaths(p); !slices.Equal(paths, []string{"spec.image", "spec.pod"}) {
		t.Fatalf("problem paths %v, want [spec.image spec.pod]", paths)
	}
}

// An update of an endpoint on the local runtime refuses pod settings as
// its create does (with the spec's other problems, paths without spec.),
// rather than ignoring them; one on a cluster takes them.
func TestEndpointUpdateRefusesPodOnTheLocalRuntime(t *testing.T) {
	eps := newFakeEndpoints()
	h := newHarness(t, WithEndpoints(eps), WithTaskQueue("atelier-local"))
	h.cat.clusters["east"] = gpuCluster("east")
	const path = "/v1/projects/alpha/endpoints"
	wantStatus(t, h.do("POST", path, h.editor, endpointBody("local", "", vllmSpec("vllm/vllm-openai:v0.9.1"))), http.StatusCreated)
	wantStatus(t, h.do("POST", path, h.editor, endpointBody("east", "east", vllmSpec("vllm/vllm-openai:v0.9.1"))), http.StatusCreated)
	withPod := func(image string) map[string]any {
		s := vllmSpec(image)
		s["pod"] = map[string]any{"tolerations": []any{map[string]any{"key": "gpu", "operator": "Exists"}}}
		return s
	}

	p := wantProblem(t, h.do("PUT", path+"/local", h.editor, withPod("")), http.StatusUnprocessableEntity, "invalid-endpoint-spec")
	if paths := errorPaths(p); !slices.Equal(paths, []string{"image", "pod"}) {
		t.Fatalf("problem paths %v, want [image pod]", paths)
	}
	p = wantProblem(t, h.do("PUT", path+"/local", h.editor, withPod("vllm/vllm-openai:v0.9.2")), http.StatusUnprocessableEntity, "invalid-endpoint-spec")
	if paths := errorPaths(p); !slices.Equal(paths, []string{"pod"}) || p.Detail == nil || !strings.Contains(*p.Detail, "local runtime") {
		t.Fatalf("problem %v: %v, want [pod] saying the endpoint runs on the local runtime", paths, p.Detail)
	}
	if st := eps.eps["alpha/local"]; st.Current != 1 || len(st.Revisions) != 1 {
		t.Fatalf("a refused update made revision %d", st.Current)
	}
	// Without pod settings the local endpoint updates; on a cluster they
	// are taken.
	wantStatus(t, h.do("PUT", path+"/local", h.editor, vllmSpec("vllm/vllm-openai:v0.9.2")), http.StatusOK)
	r := h.do("PUT", path+"/east", h.editor, withPod("vllm/vllm-openai:v0.9.2"))
	wantStatus(t, r, http.StatusOK)
	var ep gen.Endpoint
	r.json(t, &ep)
	if ep.Current != 2 || !strings.Contains(string(ep.Spec), `"tolerations"`) {
		t.Fatalf("cluster endpoint after update: current %d, spec %s", ep.Current, ep.Spec)
	}
	// An endpoint that does not exist is not found, whatever the spec.
	wantProblem(t, h.do("PUT", path+"/nope", h.editor, withPod("vllm/vllm-openai:v0.9.2")), http.StatusNotFound, "not-found")
}

// An unknown field (a typo) or a value that does not decode is one problem
// among the others of the spec, all reported at once with their paths, on
// create and on update; so is an unregistered cluster. A value that does
// not decode is validated as absent, and a problem that only says so (at
// its path or under it) is not reported twice.
func TestEndpointSpecProblemsAllAtOnce(t *testing.T) {
	eps := newFakeEndpoints()
	h := newHarness(t, WithEndpoints(eps), WithTaskQueue("atelier-local"))
	h.cat.clusters["east"] = gpuCluster("east")
	const path = "/v1/projects/alpha/endpoints"

	typoAndMore := vllmSpec("")
	typoAndMore["replica"] = 3
	typoAndMore["replicas"] = map[string]any{"min": 4, "max": 2}
	undecodable := vllmSpec("")
	undecodable["resources"] = map[string]any{"gpuType": "NVIDIA-L4", "gpus": "one"}
	for _, tc := range []struct {
		name, method, path string
		body               any
		want               []string
	}{
		{"create: unknown field and invalid values", "POST", path, endpointBody("chat", "east", typoAndMore),
			[]string{"spec.replica", "spec.image", "spec.replicas.max"}},
		{"create: and an unregistered cluster", "POST", path, endpointBody("chat", "west", typoAndMore),
			[]string{"spec.replica", "spec.image", "spec.replicas.max", "cluster"}},
		{"update: unknown field and invalid values", "PUT", path + "/chat", typoAndMore,
			[]string{"replica", "image", "replicas.max"}},
		{"create: a value that does not decode and an invalid one", "POST", path, endpointBody("chat", "east", undecodable),
			[]string{"spec.resources.gpus", "spec.image"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := wantProblem(t, h.do(tc.method, tc.path, h.editor, tc.body), http.StatusUnprocessableEntity, "invalid-endpoint-spec")
			if got := errorPaths(p); !slices.Equal(got, tc.want) {
				t.Fatalf("problems at %v, want %v (%+v)", got, tc.want, *p.Errors)
			}
			if want := fmt.Sprintf("%d problems; first: %s: ", len(tc.want), tc.want[0]); p.Detail == nil || !strings.HasPrefix(*p.Detail, want) {
				t.Errorf("detail %v, want it to start with %q", p.Detail, want)
			}
		})
	}
	if len(eps.queues) != 0 {
		t.Fatalf("an invalid endpoint was created: %v", eps.queues)
	}
}
