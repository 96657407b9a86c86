package models_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/models"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// registry resolves sentiment@champion to its version; deleted versions
// cannot be referenced. What the tests do not call panics.
type registry struct {
	models.Registry
	champion int
	deleted  map[int]bool
	refs     []string
}

func (r *registry) GetModel(_ context.Context, project, name string) (catalog.Model, error) {
	return catalog.Model{Project: project, Name: name, Latest: r.champion, Aliases: map[string]int{"champion": r.champion}}, nil
}

func (r *registry) GetModelVersion(_ context.Context, project, model, ref string) (catalog.ModelVersion, error) {
	return catalog.ModelVersion{Project: project, Model: model, Version: r.champion}, nil
}

func (r *registry) ReferenceModelVersion(_ context.Context, project, endpoint, model string, version int) error {
	if r.deleted[version] {
		return catalog.ErrNotFound
	}
	r.refs = append(r.refs, fmt.Sprintf("%s/%s->%s@%d", project, endpoint, model, version))
	return nil
}

// Resolving a followed alias records the endpoint's reference to the
// version it answers; a version deleted meanwhile is a problem, with no
// version and no reference.
func TestResolveEndpointModelReferencesTheVersion(t *testing.T) {
	reg := &registry{champion: 4, deleted: map[int]bool{5: true}}
	a := models.New(reg, nil)
	req := activities.ResolveEndpointModelRequest{Project: "vision", Endpoint: "chat",
		Model: inference.Model{Ref: "sentiment@champion", Follow: true}}
	res, err := a.ResolveEndpointModel(t.Context(), req)
	if err != nil || res.Problem != "" || res.Model.Registered == nil || res.Model.Registered.Version != 4 {
		t.Fatalf("resolved %+v, %v", res, err)
	}
	if fmt.Sprint(reg.refs) != "[vision/chat->sentiment@4]" {
		t.Fatalf("references %v", reg.refs)
	}
	reg.champion = 5
	res, err = a.ResolveEndpointModel(t.Context(), req)
	if err != nil || res.Model.Registered != nil || !strings.Contains(res.Problem, "version 5 of model sentiment was deleted") {
		t.Fatalf("deleted version resolved %+v, %v", res, err)
	}
	if len(reg.refs) != 1 {
		t.Fatalf("references %v", reg.refs)
	}
}
