package pipelines

import (
	"context"
	"errors"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
)

type fakeVersions map[string]catalog.PipelineVersion // by "project/name/version"; version 0 = newest

func (f fakeVersions) GetPipelineVersion(_ context.Context, project, name string, version int) (catalog.PipelineVersion, error) {
	if project == "down" {
		return catalog.PipelineVersion{}, catalog.ErrUnavailable
	}
	v, ok := f[project+"/"+name+"/"+string(rune('0'+version))]
	if !ok {
		return catalog.PipelineVersion{}, catalog.ErrNotFound
	}
	return v, nil
}

func TestResolve(t *testing.T) {
	spec := []byte(`{"steps":[{"name":"a","container":{"command":["x"]}}]}`)
	r := New(fakeVersions{
		"p/train/0": {Version: 3, Spec: spec},
		"p/train/2": {Version: 2, Spec: spec},
	})
	ctx := context.Background()
	res, err := r.Resolve(ctx, activities.ResolvePipelineRequest{Project: "p", Pipeline: "train"})
	if err != nil || res.Version != 3 || len(res.Spec.Steps) != 1 || res.Spec.Steps[0].Name != "a" {
		t.Fatalf("newest: %+v, %v", res, err)
	}
	if res, err := r.Resolve(ctx, activities.ResolvePipelineRequest{Project: "p", Pipeline: "train", Version: 2}); err != nil || res.Version != 2 {
		t.Fatalf("pinned: %+v, %v", res, err)
	}
	for _, tc := range []struct {
		req  activities.ResolvePipelineRequest
		want string
	}{
		{activities.ResolvePipelineRequest{Project: "other", Pipeline: "train"}, `pipeline "train" not found in project "other"`},
		{activities.ResolvePipelineRequest{Project: "p", Pipeline: "train", Version: 5}, `pipeline "train" has no version 5 in project "p"`},
	} {
		_, err := r.Resolve(ctx, tc.req)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != activities.ErrTypePipelineNotFound || !app.NonRetryable() || app.Message() != tc.want {
			t.Errorf("%+v: %v, want a non-retryable %s %q", tc.req, err, activities.ErrTypePipelineNotFound, tc.want)
		}
	}
	// A catalogue outage is retried by Temporal.
	_, err = r.Resolve(ctx, activities.ResolvePipelineRequest{Project: "down", Pipeline: "train"})
	var app *temporal.ApplicationError
	if err == nil || errors.As(err, &app) {
		t.Fatalf("outage: %v, want a plain (retryable) error", err)
	}
}
