package models

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// Registry is the model registry (internal/store).
type Registry interface {
	catalog.ModelReader
	catalog.ModelReferrer
	SetModelAlias(ctx context.Context, project, model, alias string, version int, actor string) (*int, error)
	RegisterModelVersion(ctx context.Context, v catalog.NewModelVersion) (catalog.ModelVersion, bool, error)
	DeleteModelAlias(ctx context.Context, project, model, alias, actor string) error
}

// Endpoints reaches a project's endpoints (client/endpointclient).
type Endpoints interface {
	Names(ctx context.Context, project string) ([]string, error)
	ModelMoved(ctx context.Context, project, name string, m activities.ModelMoved) error
}

// Activities are the registry's activities.
type Activities struct {
	reg       Registry
	endpoints Endpoints
}

// New returns the activities over reg and endpoints.
func New(reg Registry, endpoints Endpoints) *Activities {
	return &Activities{reg: reg, endpoints: endpoints}
}

// Register registers the activities under their contract names.
func (a *Activities) Register(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(a.SetAlias, activity.RegisterOptions{Name: activities.SetModelAliasName})
	reg.RegisterActivityWithOptions(a.NotifyEndpoints, activity.RegisterOptions{Name: activities.NotifyModelMovedName})
	reg.RegisterActivityWithOptions(a.ResolveEndpointModel, activity.RegisterOptions{Name: activities.ResolveEndpointModelName})
}

// SetAlias moves or removes the alias. What does not exist is NotFound in
// the result (nothing to retry); a catalogue that cannot be reached is an
// error (retried). Retrying a move that committed records it twice in the
// alias history, with the same version before and after.
func (a *Activities) SetAlias(ctx context.Context, in activities.MoveModelAliasInput) (activities.MoveModelAliasResult, error) {
	var res activities.MoveModelAliasResult
	var err error
	if in.Artifact != nil {
		// Registered once per artifact: a retry, or an output that also
		// declared `register:`, gets the same version.
		v, _, err := a.reg.RegisterModelVersion(ctx, catalog.NewModelVersion{Project: in.Project, Model: in.Model, Artifact: *in.Artifact, Actor: in.Actor})
		if err != nil {
			return res, fmt.Errorf("register artifact %s as a version of %s: %w", in.Artifact.ID, in.Model, err)
		}
		in.Version = &v.Version
	}
	if in.Version == nil {
		err = a.reg.DeleteModelAlias(ctx, in.Project, in.Model, in.Alias, in.Actor)
	} else {
		res.Before, err = a.reg.SetModelAlias(ctx, in.Project, in.Model, in.Alias, *in.Version, in.Actor)
		res.Version = *in.Version
	}
	if errors.Is(err, catalog.ErrNotFound) {
		res.NotFound = a.missing(ctx, in)
		return res, nil
	}
	return res, err
}

// missing names what a move found missing, in the words a user reads.
func (a *Activities) missing(ctx context.Context, in activities.MoveModelAliasInput) string {
	if _, err := a.reg.GetModel(ctx, in.Project, in.Model); errors.Is(err, catalog.ErrNotFound) {
		return fmt.Sprintf("no model %s in project %s", in.Model, in.Project)
	}
	if in.Version == nil {
		return fmt.Sprintf("model %s has no alias %s", in.Model, in.Alias)
	}
	return fmt.Sprintf("model %s has no version %d", in.Model, *in.Version)
}

// NotifyEndpoints signals the move to every open endpoint of the project
// and returns how many it told. Endpoints decide themselves whether they
// follow the alias: the catalogue does not know what an endpoint's
// current revision serves, its workflow does. A retry tells them again,
// which they tolerate (they resolve the alias afresh).
func (a *Activities) NotifyEndpoints(ctx context.Context, req activities.NotifyModelMovedRequest) (int, error) {
	names, err := a.endpoints.Names(ctx, req.Project)
	if err != nil {
		return 0, err
	}
	for _, n := range names {
		if err := a.endpoints.ModelMoved(ctx, req.Project, n, req.Moved); err != nil {
			return 0, err
		}
	}
	return len(names), nil
}

// ResolveEndpointModel resolves req.Model.Ref to the version it names now
// and records the endpoint's reference to that version before answering,
// so that the revision the endpoint then makes serves a version that
// cannot be deleted (catalog.ReferenceEndpointModel). A version deleted
// meanwhile is a Problem. A reference the endpoint does not use after all
// (it changed meanwhile) is removed by the gateway's sweeper.
func (a *Activities) ResolveEndpointModel(ctx context.Context, req activities.ResolveEndpointModelRequest) (activities.ResolveEndpointModelResult, error) {
	m := req.Model
	endpoint := req.Endpoint
	if endpoint == "" {
		endpoint = endpointOfWorkflow(ctx, req.Project)
	}
	var problem string
	var err error
	if endpoint == "" {
		problem, err = catalog.ResolveEndpointModel(ctx, a.reg, req.Project, &m)
	} else {
		problem, err = catalog.ReferenceEndpointModel(ctx, a.reg, a.reg, req.Project, endpoint, &m)
	}
	if err != nil {
		return activities.ResolveEndpointModelResult{}, err
	}
	return activities.ResolveEndpointModelResult{Model: m, Problem: problem}, nil
}

// endpointOfWorkflow reads the endpoint's name from the ID of the
// workflow that called the activity (activities.EndpointWorkflowID), for
// requests scheduled before they named it; "" when it is not an
// endpoint's.
func endpointOfWorkflow(ctx context.Context, project string) string {
	if !activity.IsActivity(ctx) {
		return ""
	}
	prefix := activities.EndpointWorkflowID(project, "")
	id := activity.GetInfo(ctx).WorkflowExecution.ID
	if name, ok := strings.CutPrefix(id, prefix); ok && name != "" && !strings.Contains(name, "/") {
		return name
	}
	return ""
}
