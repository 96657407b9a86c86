package lineage

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Catalog is what resolving reads (internal/store).
type Catalog interface {
	GetArtifact(ctx context.Context, project, id string) (catalog.ArtifactLineage, error)
	GetModelVersion(ctx context.Context, project, model, ref string) (catalog.ModelVersion, error)
	GetModel(ctx context.Context, project, name string) (catalog.Model, error)
}

// Activities resolves catalogue inputs.
type Activities struct{ cat Catalog }

// New returns the activities over cat.
func New(cat Catalog) *Activities { return &Activities{cat: cat} }

// Register registers Resolve under its contract name.
func (a *Activities) Register(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(a.Resolve, activity.RegisterOptions{Name: activities.ResolveArtifactsName})
}

// Resolve looks each input up in the run's project. What does not exist
// is a Problem (the step fails naming it); a catalogue that cannot be
// reached is an error (retried).
func (a *Activities) Resolve(ctx context.Context, req activities.ResolveArtifactsRequest) (activities.ResolveArtifactsResult, error) {
	var out activities.ResolveArtifactsResult
	for _, in := range req.Inputs {
		art, problem, err := a.resolve(ctx, req.Project, in)
		if err != nil {
			return out, err
		}
		if problem != "" {
			return activities.ResolveArtifactsResult{Problem: fmt.Sprintf("input artifact %q: %s", in.Name, problem)}, nil
		}
		art.Name, art.From = in.Name, in.Ref()
		out.Artifacts = append(out.Artifacts, art)
	}
	return out, nil
}

func (a *Activities) resolve(ctx context.Context, project string, in pipeline.ArtifactInput) (runstate.Artifact, string, error) {
	if in.Artifact != "" {
		l, err := a.cat.GetArtifact(ctx, project, in.Artifact)
		switch {
		case errors.Is(err, catalog.ErrNotFound):
			return runstate.Artifact{}, fmt.Sprintf("no artifact %s in project %s", in.Artifact, project), nil
		case err != nil:
			return runstate.Artifact{}, "", err
		}
		return l.Artifact.Artifact, "", nil
	}
	v, problem, err := catalog.ResolveModel(ctx, a.cat, project, in.Model)
	if problem != "" || err != nil {
		return runstate.Artifact{}, problem, err
	}
	return v.Artifact, "", nil
}
