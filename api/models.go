package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
)

// ModelRegistry is the project's model registry (internal/store). Every
// method is scoped by project: another tenant's model is
// catalog.ErrNotFound.
type ModelRegistry interface {
	CreateModel(ctx context.Context, project, name, description, actor string) (catalog.Model, error)
	GetModel(ctx context.Context, project, name string) (catalog.Model, error)
	ListModels(ctx context.Context, project string) ([]catalog.Model, error)
	RegisterModelVersion(ctx context.Context, v catalog.NewModelVersion) (catalog.ModelVersion, bool, error)
	ListModelVersions(ctx context.Context, project, model string) ([]catalog.ModelVersion, error)
	GetModelVersion(ctx context.Context, project, model, ref string) (catalog.ModelVersion, error)
	SetModelAlias(ctx context.Context, project, model, alias string, version int, actor string) (*int, error)
	DeleteModelAlias(ctx context.Context, project, model, alias, actor string) error
	ModelAliasEvents(ctx context.Context, project, model string, max int) ([]catalog.ModelAliasEvent, error)
}

// WithModels serves /models from r; without it those routes answer 503.
func WithModels(r ModelRegistry) Option { return func(s *server) { s.models = r } }

var ptInvalidModel = problemType{"invalid-model", "Invalid model request", http.StatusUnprocessableEntity}

func (s *server) modelsOn() error {
	if s.models == nil {
		return newProblem(ptUnavailable, "the model registry is not served by this gateway")
	}
	return nil
}

func modelErr(project, model string, err error) error {
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		// One wording whatever is missing, so that another tenant's
		// models cannot be probed.
		return notFound("model %s (or the version or alias asked for) not found in project %q", model, project)
	case errors.Is(err, catalog.ErrConflict):
		return newProblem(ptAlreadyExists, "model %s already exists in project %q", model, project)
	}
	return internalError(err)
}

// ListModels lists the project's models.
func (s *server) ListModels(ctx context.Context, req gen.ListModelsRequestObject) (gen.ListModelsResponseObject, error) {
	if err := s.modelsOn(); err != nil {
		return nil, err
	}
	ms, err := s.models.ListModels(ctx, req.Project)
	if err != nil {
		return nil, internalError(err)
	}
	return gen.ListModels200JSONResponse{Items: views(ms, modelView)}, nil
}

// CreateModel registers a model without versions.
func (s *server) CreateModel(ctx context.Context, req gen.CreateModelRequestObject) (gen.CreateModelResponseObject, error) {
	if err := s.modelsOn(); err != nil {
		return nil, err
	}
	b := deref(req.Body)
	if !pipeline.ValidModelName(b.Name) {
		fe := []gen.FieldError{{Path: "name", Message: "lowercase letters, digits, '.', '_' and '-'; at most 63"}}
		return nil, newProblem(ptInvalidModel, "%s", summarize(fe)).withErrors(fe)
	}
	m, err := s.models.CreateModel(ctx, req.Project, b.Name, deref(b.Description), principal(ctx).Name)
	if err != nil {
		return nil, modelErr(req.Project, b.Name, err)
	}
	return gen.CreateModel201JSONResponse(modelView(m)), nil
}

// GetModel reads a model with its aliases.
func (s *server) GetModel(ctx context.Context, req gen.GetModelRequestObject) (gen.GetModelResponseObject, error) {
	if err := s.modelsOn(); err != nil {
		return nil, err
	}
	m, err := s.models.GetModel(ctx, req.Project, req.Model)
	if err != nil {
		return nil, modelErr(req.Project, req.Model, err)
	}
	return gen.GetModel200JSONResponse(modelView(m)), nil
}

// ListModelVersions lists a model's versions.
func (s *server) ListModelVersions(ctx context.Context, req gen.ListModelVersionsRequestObject) (gen.ListModelVersionsResponseObject, error) {
	if err := s.modelsOn(); err != nil {
		return nil, err
	}
	vs, err := s.models.ListModelVersions(ctx, req.Project, req.Model)
	if err != nil {
		return nil, modelErr(req.Project, req.Model, err)
	}
	return gen.ListModelVersions200JSONResponse{Items: views(vs, modelVersionView)}, nil
}

// CreateModelVersion registers one of the project's artifacts as the
// model's next version.
func (s *server) CreateModelVersion(ctx context.Context, req gen.CreateModelVersionRequestObject) (gen.CreateModelVersionResponseObject, error) {
	if err := s.modelsOn(); err != nil {
		return nil, err
	}
	if err := s.artifactsOn(); err != nil {
		return nil, err
	}
	b := deref(req.Body)
	l, err := s.lineage.GetArtifact(ctx, req.Project, b.Artifact)
	if errors.Is(err, catalog.ErrNotFound) {
		fe := []gen.FieldError{{Path: "artifact", Message: "no artifact with this ID in the project"}}
		return nil, newProblem(ptInvalidModel, "%s", summarize(fe)).withErrors(fe)
	}
	if err != nil {
		return nil, internalError(err)
	}
	v, created, err := s.models.RegisterModelVersion(ctx, catalog.NewModelVersion{
		Project: req.Project, Model: req.Model, Artifact: l.Artifact.Artifact, Format: deref(b.Format),
		Metadata: deref(b.Metadata), Actor: principal(ctx).Name,
	})
	if err != nil {
		return nil, modelErr(req.Project, req.Model, err)
	}
	if created {
		return gen.CreateModelVersion201JSONResponse(modelVersionView(v)), nil
	}
	return gen.CreateModelVersion200JSONResponse(modelVersionView(v)), nil
}

// GetModelVersion reads a version by number or alias.
func (s *server) GetModelVersion(ctx context.Context, req gen.GetModelVersionRequestObject) (gen.GetModelVersionResponseObject, error) {
	if err := s.modelsOn(); err != nil {
		return nil, err
	}
	v, err := s.models.GetModelVersion(ctx, req.Project, req.Model, req.Ref)
	if err != nil {
		return nil, modelErr(req.Project, req.Model, err)
	}
	return gen.GetModelVersion200JSONResponse(modelVersionView(v)), nil
}

// SetModelAlias moves an alias to a version.
func (s *server) SetModelAlias(ctx context.Context, req gen.SetModelAliasRequestObject) (gen.SetModelAliasResponseObject, error) {
	if err := s.modelsOn(); err != nil {
		return nil, err
	}
	version := deref(req.Body).Version
	if _, err := s.models.SetModelAlias(ctx, req.Project, req.Model, req.Alias, version, principal(ctx).Name); err != nil {
		if errors.Is(err, catalog.ErrNotFound) {
			if _, gerr := s.models.GetModel(ctx, req.Project, req.Model); gerr == nil {
				fe := []gen.FieldError{{Path: "version", Message: "the model has no such version"}}
				return nil, newProblem(ptInvalidModel, "%s", summarize(fe)).withErrors(fe)
			}
		}
		return nil, modelErr(req.Project, req.Model, err)
	}
	m, err := s.models.GetModel(ctx, req.Project, req.Model)
	if err != nil {
		return nil, modelErr(req.Project, req.Model, err)
	}
	return gen.SetModelAlias200JSONResponse(modelView(m)), nil
}

// DeleteModelAlias removes an alias.
func (s *server) DeleteModelAlias(ctx context.Context, req gen.DeleteModelAliasRequestObject) (gen.DeleteModelAliasResponseObject, error) {
	if err := s.modelsOn(); err != nil {
		return nil, err
	}
	if err := s.models.DeleteModelAlias(ctx, req.Project, req.Model, req.Alias, principal(ctx).Name); err != nil {
		return nil, modelErr(req.Project, req.Model, err)
	}
	return gen.DeleteModelAlias204Response{}, nil
}

// ListModelAliasEvents serves a model's alias history.
func (s *server) ListModelAliasEvents(ctx context.Context, req gen.ListModelAliasEventsRequestObject) (gen.ListModelAliasEventsResponseObject, error) {
	if err := s.modelsOn(); err != nil {
		return nil, err
	}
	if _, err := s.models.GetModel(ctx, req.Project, req.Model); err != nil {
		return nil, modelErr(req.Project, req.Model, err)
	}
	evs, err := s.models.ModelAliasEvents(ctx, req.Project, req.Model, 500)
	if err != nil {
		return nil, internalError(err)
	}
	out := gen.ModelAliasEventList{Items: make([]gen.ModelAliasEvent, len(evs))}
	for i, e := range evs {
		out.Items[i] = gen.ModelAliasEvent{Alias: e.Alias, From: e.From, To: e.To, Actor: e.Actor, At: e.At}
	}
	return gen.ListModelAliasEvents200JSONResponse(out), nil
}
