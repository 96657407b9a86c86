// Package pipelines reads stored pipelines for pipeline steps
// (activities.ResolvePipelineName): the version a child run runs, decided
// when the step starts and recorded in the parent's history.
package pipelines

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
)

// VersionReader reads pipeline versions; the Postgres store implements it.
type VersionReader interface {
	// GetPipelineVersion returns the newest version when version is 0.
	GetPipelineVersion(ctx context.Context, project, name string, version int) (catalog.PipelineVersion, error)
}

// Resolver is the activity.
type Resolver struct {
	store VersionReader
}

// New returns a Resolver reading store.
func New(store VersionReader) *Resolver { return &Resolver{store: store} }

// Register registers Resolve under its contract name.
func (r *Resolver) Register(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(r.Resolve, activity.RegisterOptions{Name: activities.ResolvePipelineName})
}

// Resolve returns the version of the pipeline req names in req's project
// (the newest for version 0). A missing pipeline or version is a
// non-retryable ErrTypePipelineNotFound; a catalogue error is retried.
func (r *Resolver) Resolve(ctx context.Context, req activities.ResolvePipelineRequest) (activities.ResolvePipelineResult, error) {
	v, err := r.store.GetPipelineVersion(ctx, req.Project, req.Pipeline, req.Version)
	if errors.Is(err, catalog.ErrNotFound) {
		msg := fmt.Sprintf("pipeline %q not found in project %q", req.Pipeline, req.Project)
		if req.Version > 0 {
			msg = fmt.Sprintf("pipeline %q has no version %d in project %q", req.Pipeline, req.Version, req.Project)
		}
		return activities.ResolvePipelineResult{}, temporal.NewNonRetryableApplicationError(msg, activities.ErrTypePipelineNotFound, nil)
	}
	if err != nil {
		return activities.ResolvePipelineResult{}, fmt.Errorf("read pipeline %s/%s version %d: %w", req.Project, req.Pipeline, req.Version, err)
	}
	var p pipeline.Spec
	if err := json.Unmarshal(v.Spec, &p); err != nil {
		// Stored specs were validated; this is a catalogue defect.
		return activities.ResolvePipelineResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("stored pipeline %s version %d cannot be decoded: %v", req.Pipeline, v.Version, err), activities.ErrTypePipelineNotFound, nil)
	}
	return activities.ResolvePipelineResult{Version: v.Version, Spec: p}, nil
}
