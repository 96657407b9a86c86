package api

import (
	"context"
	"net/http"
	"reflect"
	"sync"
	"testing"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// fakeModels is a model registry of models by project; what these tests do
// not call panics (the embedded nil interface).
type fakeModels struct {
	ModelRegistry
	mu       sync.Mutex
	models   map[string][]catalog.Model
	listed   int
	getCalls int
}

func (f *fakeModels) ListModels(_ context.Context, project string) ([]catalog.Model, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listed++
	return f.models[project], nil
}

func (f *fakeModels) GetModel(_ context.Context, project, name string) (catalog.Model, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.getCalls++
	for _, m := range f.models[project] {
		if m.Name == name {
			return m, nil
		}
	}
	return catalog.Model{}, catalog.ErrNotFound
}

func (f *fakeModels) CreateModel(_ context.Context, project, name, description, actor string) (catalog.Model, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.models[project] {
		if m.Name == name {
			return catalog.Model{}, catalog.ErrConflict
		}
	}
	m := catalog.Model{Project: project, Name: name, Description: description, CreatedAt: t0, CreatedBy: actor, Aliases: map[string]int{}}
	f.models[project] = append(f.models[project], m)
	return m, nil
}

// The list route carries each model's aliases as the registry read them
// with the list (one read: no model is asked for on its own); a model
// without aliases has an empty object, never null.
func TestListModelsCarriesAliases(t *testing.T) {
	reg := &fakeModels{models: map[string][]catalog.Model{
		"alpha": {
			{Project: "alpha", Name: "fraud", Latest: 1, CreatedAt: t0, CreatedBy: "ci", Aliases: map[string]int{"champion": 1}},
			{Project: "alpha", Name: "new", CreatedAt: t0, CreatedBy: "ci"},
			{Project: "alpha", Name: "sentiment", Latest: 3, CreatedAt: t0, CreatedBy: "run r1", Aliases: map[string]int{"champion": 2, "candidate": 3}},
		},
		"beta": {{Project: "beta", Name: "sentiment", Latest: 1, CreatedAt: t0, Aliases: map[string]int{"shadow": 1}}},
	}}
	h := newHarness(t, WithModels(reg, nil))
	r := h.do("GET", "/v1/projects/alpha/models", h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	var list gen.ModelList
	r.json(t, &list)
	got := map[string]map[string]int{}
	for _, m := range list.Items {
		got[m.Name] = m.Aliases
	}
	want := map[string]map[string]int{"fraud": {"champion": 1}, "new": {}, "sentiment": {"champion": 2, "candidate": 3}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("aliases %v, want %v", got, want)
	}
	if reg.listed != 1 || reg.getCalls != 0 {
		t.Errorf("the list read the registry %d times and asked %d models on their own; want one list and no model", reg.listed, reg.getCalls)
	}
}

// Creating a model: 201 with no version and no alias; a bad name is a 422
// at "name" (the web UI shows it at its field), an existing one a 409.
func TestCreateModel(t *testing.T) {
	reg := &fakeModels{models: map[string][]catalog.Model{}}
	h := newHarness(t, WithModels(reg, nil))
	r := h.do("POST", "/v1/projects/alpha/models", h.editor, map[string]any{"name": "fraud", "description": "card fraud"})
	wantStatus(t, r, http.StatusCreated)
	var m gen.Model
	r.json(t, &m)
	if m.Name != "fraud" || m.Description != "card fraud" || m.Latest != 0 || m.CreatedBy != "ci" || len(m.Aliases) != 0 {
		t.Errorf("created %+v", m)
	}

	p := wantProblem(t, h.do("POST", "/v1/projects/alpha/models", h.editor, map[string]any{"name": "Fraud Model"}), http.StatusUnprocessableEntity, "invalid-model")
	if got := errorPaths(p); !reflect.DeepEqual(got, []string{"name"}) {
		t.Errorf("error paths %v, want [name]", got)
	}
	wantProblem(t, h.do("POST", "/v1/projects/alpha/models", h.editor, map[string]any{"name": "fraud"}), http.StatusConflict, "already-exists")
	wantStatus(t, h.do("POST", "/v1/projects/alpha/models", h.viewer, map[string]any{"name": "other"}), http.StatusForbidden)
}
