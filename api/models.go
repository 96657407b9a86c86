package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/client/endpointclient"
	"github.com/atelier-ml/atelier/client/modelclient"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/schema"
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
	ModelAliasEvents(ctx context.Context, project, model string, max int) ([]catalog.ModelAliasEvent, error)
	DeleteModelVersion(ctx context.Context, project, model string, version int, actor string) error
	// ReferenceModelVersion records that an endpoint references a
	// version, before the spec using it is submitted; a version deleted
	// (meanwhile) is catalog.ErrNotFound.
	ReferenceModelVersion(ctx context.Context, project, endpoint, model string, version int) error
	// ModelReferences lists the endpoints' references to a model's
	// versions (one query).
	ModelReferences(ctx context.Context, project, model string) ([]catalog.ModelVersionRef, error)
	// RemoveEndpointModelReferences removes an endpoint's references
	// recorded before a time (its deletion).
	RemoveEndpointModelReferences(ctx context.Context, project, endpoint string, before time.Time) (int64, error)
}

// AliasMover moves aliases through a workflow that also tells the
// endpoints following them (client/modelclient). Errors other than
// modelclient.ErrNoAnswer mean nothing moved.
type AliasMover interface {
	MoveAlias(ctx context.Context, in activities.MoveModelAliasInput) (activities.MoveModelAliasResult, error)
}

// WithModels serves /models from r, moving aliases through aliases;
// without it those routes answer 503.
func WithModels(r ModelRegistry, aliases AliasMover) Option {
	return func(s *server) { s.models, s.aliases = r, aliases }
}

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
	if !schema.ValidModelName(b.Name) {
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
	view := modelVersionView(v)
	view.RunMetrics = s.runMetrics(ctx, req.Project, v.Artifact.Producer.Run)
	return gen.GetModelVersion200JSONResponse(view), nil
}

// SetModelAlias moves an alias to a version; the endpoints following the
// alias roll out the version (workflows/models).
func (s *server) SetModelAlias(ctx context.Context, req gen.SetModelAliasRequestObject) (gen.SetModelAliasResponseObject, error) {
	version := deref(req.Body).Version
	if err := s.moveAlias(ctx, req.Project, req.Model, req.Alias, &version); err != nil {
		return nil, err
	}
	m, err := s.models.GetModel(ctx, req.Project, req.Model)
	if err != nil {
		return nil, modelErr(req.Project, req.Model, err)
	}
	return gen.SetModelAlias200JSONResponse(modelView(m)), nil
}

// DeleteModelAlias removes an alias; endpoints following it keep serving
// the version it named (and say so in their events).
func (s *server) DeleteModelAlias(ctx context.Context, req gen.DeleteModelAliasRequestObject) (gen.DeleteModelAliasResponseObject, error) {
	if err := s.moveAlias(ctx, req.Project, req.Model, req.Alias, nil); err != nil {
		return nil, err
	}
	return gen.DeleteModelAlias204Response{}, nil
}

// moveAlias runs the move and maps its answer: a missing model is 404
// (the same words whatever is missing, for another tenant), a missing
// version a 422 at "version".
func (s *server) moveAlias(ctx context.Context, project, model, alias string, version *int) error {
	if err := s.modelsOn(); err != nil {
		return err
	}
	if s.aliases == nil {
		return newProblem(ptUnavailable, "alias moves are not served by this gateway")
	}
	if !schema.ValidModelName(alias) {
		fe := []gen.FieldError{{Path: "alias", Message: "lowercase letters, digits, '.', '_' and '-'; at most 63"}}
		return newProblem(ptInvalidModel, "%s", summarize(fe)).withErrors(fe)
	}
	res, err := s.aliases.MoveAlias(ctx, activities.MoveModelAliasInput{Project: project, Model: model, Alias: alias, Version: version, Actor: principal(ctx).Name})
	switch {
	case errors.Is(err, modelclient.ErrNoAnswer):
		return newProblem(ptUnavailable, "the move of alias %s did not answer in time: no worker may be running it; it applies once one does (GET the model to see)", alias).
			withHeader("Retry-After", retryAfterSeconds).withCause(err)
	case err != nil:
		return unavailable(err)
	case res.NotFound != "" && version != nil:
		if _, gerr := s.models.GetModel(ctx, project, model); gerr == nil {
			fe := []gen.FieldError{{Path: "version", Message: "the model has no such version"}}
			return newProblem(ptInvalidModel, "%s", summarize(fe)).withErrors(fe)
		}
		return modelErr(project, model, catalog.ErrNotFound)
	case res.NotFound != "":
		return modelErr(project, model, catalog.ErrNotFound)
	}
	return nil
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

var ptModelInUse = problemType{"model-version-in-use", "Model version in use", http.StatusConflict}

// DeleteModelVersion deletes a version nothing serves or names.
func (s *server) DeleteModelVersion(ctx context.Context, req gen.DeleteModelVersionRequestObject) (gen.DeleteModelVersionResponseObject, error) {
	if err := s.modelsOn(); err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(req.Ref)
	if err != nil || n < 1 {
		if _, gerr := s.models.GetModel(ctx, req.Project, req.Model); gerr != nil {
			return nil, modelErr(req.Project, req.Model, gerr)
		}
		fe := []gen.FieldError{{Path: "ref", Message: "delete a version by its number: an alias moves, it is not deleted with its version"}}
		return nil, newProblem(ptInvalidModel, "%s", summarize(fe)).withErrors(fe)
	}
	// The registry refuses atomically while an endpoint references the
	// version (model_version_refs, checked under the version's row lock);
	// the endpoints' workflows are asked only to name the revisions.
	err = s.models.DeleteModelVersion(ctx, req.Project, req.Model, n, principal(ctx).Name)
	var named *catalog.VersionNamedError
	var referenced *catalog.VersionReferencedError
	switch {
	case errors.As(err, &named):
		return nil, newProblem(ptModelInUse, "%s", named.Error())
	case errors.As(err, &referenced):
		return nil, newProblem(ptModelInUse, "version %d of model %s is referenced by endpoint %s: an endpoint keeps every revision it made for rollback, so the version can be deleted once the endpoint is",
			n, req.Model, strings.Join(s.referencingRevisions(ctx, req.Project, req.Model, n, referenced.Endpoints), ", "))
	case err != nil:
		return nil, modelErr(req.Project, req.Model, err)
	}
	return gen.DeleteModelVersion204Response{}, nil
}

// ListModelEndpoints answers which endpoints serve versions of a model.
func (s *server) ListModelEndpoints(ctx context.Context, req gen.ListModelEndpointsRequestObject) (gen.ListModelEndpointsResponseObject, error) {
	if err := s.modelsOn(); err != nil {
		return nil, err
	}
	if _, err := s.models.GetModel(ctx, req.Project, req.Model); err != nil {
		return nil, modelErr(req.Project, req.Model, err)
	}
	serving, err := s.modelServing(ctx, req.Project, req.Model)
	if err != nil {
		return nil, err
	}
	return gen.ListModelEndpoints200JSONResponse{Items: serving}, nil
}

// servingRole is a revision number and what it does for its endpoint.
type servingRole struct {
	n    int
	role gen.ModelServingRole
}

// modelServing answers the revisions that serve a version of model: the
// stable one and the one rolling out. The registry's references
// (model_version_refs, one query) name the candidate endpoints; only
// those endpoints' workflows, the truth of what they serve, are asked for
// the roles. An endpoint deleted meanwhile (or whose reservation is for an
// update not yet made) is skipped.
func (s *server) modelServing(ctx context.Context, project, model string) ([]gen.ModelServing, error) {
	out := []gen.ModelServing{}
	if s.endpoints == nil {
		return out, nil
	}
	refs, err := s.models.ModelReferences(ctx, project, model)
	if err != nil {
		return nil, internalError(err)
	}
	var names []string
	for _, r := range refs {
		if !slices.Contains(names, r.Endpoint) {
			names = append(names, r.Endpoint)
		}
	}
	for _, name := range names {
		st, err := s.endpoints.Status(ctx, project, name)
		if errors.Is(err, endpointclient.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, s.endpointErr(project, name, err)
		}
		roles := []servingRole{{st.Stable, gen.Stable}}
		if st.Rollout != nil {
			roles = append(roles, servingRole{st.Rollout.Candidate, gen.Candidate})
		}
		for _, r := range roles {
			for _, rev := range st.Revisions {
				m := rev.Spec.Model
				if rev.Number != r.n || m.Registered == nil || m.Registered.Model != model {
					continue
				}
				out = append(out, gen.ModelServing{Endpoint: name, Revision: rev.Number, Role: r.role,
					Version: m.Registered.Version, Ref: m.Ref, Follow: m.Follow, Run: optIf(m.Registered.Run != "", m.Registered.Run)})
			}
		}
	}
	return out, nil
}

// referencingRevisions names, for a refused deletion, each endpoint that
// references version n of model with the revisions that serve it (and
// their role), as its workflow answers; an endpoint whose workflow does
// not answer is named alone (an update in flight, or one deleted whose
// reference goes with the next sweep).
func (s *server) referencingRevisions(ctx context.Context, project, model string, n int, endpoints []string) []string {
	out := make([]string, 0, len(endpoints))
	for _, name := range endpoints {
		var st activities.EndpointStatus
		err := errors.New("no endpoints")
		if s.endpoints != nil {
			st, err = s.endpoints.Status(ctx, project, name)
		}
		if err != nil {
			out = append(out, name+" (an update in flight, or an endpoint being deleted)")
			continue
		}
		var revs []string
		for _, rev := range st.Revisions {
			if m := rev.Spec.Model.Registered; m == nil || m.Model != model || m.Version != n {
				continue
			}
			role := "kept for rollback"
			switch {
			case rev.Number == st.Stable:
				role = "stable"
			case st.Rollout != nil && rev.Number == st.Rollout.Candidate:
				role = "candidate"
			}
			revs = append(revs, fmt.Sprintf("revision %d: %s", rev.Number, role))
		}
		if len(revs) == 0 {
			out = append(out, name+" (an update in flight)")
			continue
		}
		out = append(out, name+" ("+strings.Join(revs, "; ")+")")
	}
	return out
}

// runMetrics are the scalar metrics of a run's steps as "<step>.<metric>"
// (nil when the run is gone, deleted by retention, or reported none): what
// a model version's run measured, to judge it by.
func (s *server) runMetrics(ctx context.Context, project, runID string) *map[string]float64 {
	run, err := s.cat.GetRun(ctx, project, runID)
	if err != nil {
		return nil
	}
	st := s.liveStatus(ctx, run)
	out := map[string]float64{}
	for _, step := range st.Steps {
		if step.Metrics == nil {
			continue
		}
		for k, v := range step.Metrics.Scalars {
			out[step.Name+"."+k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return &out
}
