package api

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// refModels is a registry with versions and endpoints' references to
// them, as internal/store keeps them (model_version_refs).
type refModels struct {
	*fakeModels
	mu       sync.Mutex
	eps      *fakeEndpoints
	live     map[int]bool
	refs     map[string][]int // endpoint -> versions
	existed  []bool           // whether the endpoint existed when each reference was recorded
	vanished map[int]bool     // deleted between the resolution and the reference
}

func (f *refModels) GetModelVersion(_ context.Context, project, model, ref string) (catalog.ModelVersion, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int
	if _, err := fmt.Sscan(ref, &n); err != nil || project != "alpha" || model != "sentiment" || !f.live[n] {
		return catalog.ModelVersion{}, catalog.ErrNotFound
	}
	return catalog.ModelVersion{Project: project, Model: model, Version: n}, nil
}

func (f *refModels) ReferenceModelVersion(_ context.Context, project, endpoint, model string, version int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if project != "alpha" || !f.live[version] || f.vanished[version] {
		return catalog.ErrNotFound
	}
	_, err := f.eps.Status(context.Background(), project, endpoint)
	f.existed = append(f.existed, err == nil)
	if !slices.Contains(f.refs[endpoint], version) {
		f.refs[endpoint] = append(f.refs[endpoint], version)
	}
	return nil
}

func (f *refModels) ModelReferences(_ context.Context, project, model string) ([]catalog.ModelVersionRef, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []catalog.ModelVersionRef
	if project != "alpha" {
		return out, nil
	}
	for e, vs := range f.refs {
		for _, v := range vs {
			out = append(out, catalog.ModelVersionRef{Project: project, Model: model, Version: v, Endpoint: e})
		}
	}
	slices.SortFunc(out, func(a, b catalog.ModelVersionRef) int { return strings.Compare(a.Endpoint, b.Endpoint) })
	return out, nil
}

func (f *refModels) RemoveEndpointModelReferences(_ context.Context, project, endpoint string, _ time.Time) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.refs[endpoint])
	delete(f.refs, endpoint)
	return int64(n), nil
}

func (f *refModels) DeleteModelVersion(_ context.Context, project, model string, version int, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.live[version] {
		return catalog.ErrNotFound
	}
	e := &catalog.VersionReferencedError{Model: model, Version: version}
	for name, vs := range f.refs {
		if slices.Contains(vs, version) {
			e.Endpoints = append(e.Endpoints, name)
		}
	}
	if len(e.Endpoints) > 0 {
		slices.Sort(e.Endpoints)
		return e
	}
	delete(f.live, version)
	return nil
}

// countingEndpoints counts the status queries per endpoint.
type countingEndpoints struct {
	*fakeEndpoints
	mu     sync.Mutex
	status map[string]int
}

func (c *countingEndpoints) Status(ctx context.Context, project, name string) (activities.EndpointStatus, error) {
	c.mu.Lock()
	c.status[name]++
	c.mu.Unlock()
	return c.fakeEndpoints.Status(ctx, project, name)
}

// An endpoint's reference to a model version is recorded before its
// create or update is submitted; a version referenced by any revision
// the endpoint keeps cannot be deleted (409 naming the endpoint and its
// revisions) until the endpoint is deleted. Which endpoints serve the
// model asks only the endpoints the references name. A version deleted
// while the spec was resolved is refused at model.ref.
func TestModelVersionReferences(t *testing.T) {
	fe := newFakeEndpoints()
	eps := &countingEndpoints{fakeEndpoints: fe, status: map[string]int{}}
	reg := &refModels{
		fakeModels: &fakeModels{models: map[string][]catalog.Model{"alpha": {{Project: "alpha", Name: "sentiment", Latest: 3, Aliases: map[string]int{}}}}},
		eps:        fe, live: map[int]bool{1: true, 2: true, 3: true}, refs: map[string][]int{}, vanished: map[int]bool{},
	}
	h := newHarness(t, WithEndpoints(eps), WithModels(reg, nil), WithTaskQueue("atelier-local"))
	spec := func(ref string) map[string]any {
		return map[string]any{"backend": "vllm", "model": map[string]any{"ref": ref}, "image": "vllm/vllm-openai:v0.9.1",
			"replicas": map[string]any{"min": 1, "max": 1}}
	}
	const base = "/v1/projects/alpha"
	wantStatus(t, h.do("POST", base+"/endpoints", h.editor, endpointBody("chat", "", spec("sentiment@1"))), http.StatusCreated)
	wantStatus(t, h.do("POST", base+"/endpoints", h.editor, endpointBody("plain", "", map[string]any{"backend": "vllm",
		"model": map[string]any{"name": "tiny"}, "image": "vllm/vllm-openai:v0.9.1", "replicas": map[string]any{"min": 1, "max": 1}})), http.StatusCreated)
	if !reflect.DeepEqual(reg.existed, []bool{false}) || !reflect.DeepEqual(reg.refs, map[string][]int{"chat": {1}}) {
		t.Fatalf("references %v recorded with the endpoint existing %v; want chat@1 recorded before the create", reg.refs, reg.existed)
	}
	fe.mu.Lock()
	fe.eps["alpha/chat"].Stable = 1
	fe.mu.Unlock()

	p := wantProblem(t, h.do("DELETE", base+"/models/sentiment/versions/1", h.editor, nil), http.StatusConflict, "model-version-in-use")
	if p.Detail == nil || !strings.Contains(*p.Detail, "referenced by endpoint chat (revision 1: stable)") {
		t.Fatalf("refused deletion says %v", p.Detail)
	}

	// An update to version 2: version 1 stays referenced by revision 1.
	wantStatus(t, h.do("PUT", base+"/endpoints/chat", h.editor, spec("sentiment@2")), http.StatusOK)
	if !reflect.DeepEqual(reg.existed, []bool{false, true}) || !reflect.DeepEqual(reg.refs, map[string][]int{"chat": {1, 2}}) {
		t.Fatalf("references %v after the update", reg.refs)
	}
	p = wantProblem(t, h.do("DELETE", base+"/models/sentiment/versions/1", h.editor, nil), http.StatusConflict, "model-version-in-use")
	if p.Detail == nil || !strings.Contains(*p.Detail, "chat (revision 1: stable)") {
		t.Fatalf("refused deletion says %v", p.Detail)
	}
	wantStatus(t, h.do("DELETE", base+"/models/sentiment/versions/3", h.editor, nil), http.StatusNoContent)

	// Which endpoints serve the model: only chat is asked.
	eps.mu.Lock()
	clear(eps.status)
	eps.mu.Unlock()
	r := h.do("GET", base+"/models/sentiment/endpoints", h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	var serving gen.ModelServingList
	r.json(t, &serving)
	if len(serving.Items) != 1 || serving.Items[0].Endpoint != "chat" || serving.Items[0].Version != 1 || serving.Items[0].Role != gen.Stable {
		t.Fatalf("serving %+v", serving.Items)
	}
	if !reflect.DeepEqual(eps.status, map[string]int{"chat": 1}) {
		t.Fatalf("status queries %v, want one to chat only", eps.status)
	}

	// A version deleted between the resolution and the reference.
	reg.mu.Lock()
	reg.vanished[2] = true
	reg.mu.Unlock()
	p = wantProblem(t, h.do("POST", base+"/endpoints", h.editor, endpointBody("late", "", spec("sentiment@2"))), http.StatusUnprocessableEntity, "invalid-endpoint-spec")
	if got := errorPaths(p); !reflect.DeepEqual(got, []string{"spec.model.ref"}) || !strings.Contains(*p.Detail, "was deleted while") {
		t.Fatalf("problem %v at %v", p.Detail, got)
	}
	if _, err := fe.Status(t.Context(), "alpha", "late"); err == nil {
		t.Fatal("the endpoint was created with a deleted version")
	}

	// Deleted, the endpoint releases its versions.
	wantStatus(t, h.do("DELETE", base+"/endpoints/chat", h.editor, nil), http.StatusAccepted)
	wantStatus(t, h.do("DELETE", base+"/models/sentiment/versions/1", h.editor, nil), http.StatusNoContent)
	r = h.do("GET", base+"/models/sentiment/endpoints", h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	r.json(t, &serving)
	if len(serving.Items) != 0 {
		t.Fatalf("serving after the deletion %+v", serving.Items)
	}
}
