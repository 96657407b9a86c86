package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/client/endpointclient"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/schema"
)

// Endpoints is the Temporal side of inference endpoints (implemented by
// client/endpointclient). Errors: endpointclient.ErrNotFound,
// ErrExists and *endpointclient.RejectedError.
type Endpoints interface {
	Create(ctx context.Context, project, name, workflowQueue, activityQueue string, spec inference.EndpointSpec) error
	Status(ctx context.Context, project, name string) (activities.EndpointStatus, error)
	Update(ctx context.Context, project, name string, spec inference.EndpointSpec) error
	Rollback(ctx context.Context, project, name string, to int) error
	Command(ctx context.Context, project, name string, c inference.Command) error
	Delete(ctx context.Context, project, name string) error
	List(ctx context.Context, project string) ([]endpointclient.Summary, error)
	UIURL(project, name string) string
}

// WithEndpoints serves inference endpoints through e.
func WithEndpoints(e Endpoints) Option { return func(s *server) { s.endpoints = e } }

var (
	ptInvalidEndpoint = problemType{"invalid-endpoint-spec", "Invalid endpoint spec", http.StatusUnprocessableEntity}
	ptEndpointBusy    = problemType{"endpoint-conflict", "Endpoint conflict", http.StatusConflict}
)

// CreateEndpoint starts an endpoint's workflow. Its activities run on a
// registered cluster's queue, or without a cluster on the local runtime:
// the queue of the gateway's own local worker, where that worker runs the
// replicas as processes (activities/local, Serving). The workflow itself
// always runs on the local queue.
func (s *server) CreateEndpoint(ctx context.Context, req gen.CreateEndpointRequestObject) (gen.CreateEndpointResponseObject, error) {
	if err := s.endpointsOn(); err != nil {
		return nil, err
	}
	body := deref(req.Body)
	spec, fields := decodeEndpointSpec(body.Spec, "spec")
	activityQueue, clusterProblem, err := s.endpointQueue(ctx, deref(body.Cluster))
	if err != nil {
		return nil, err
	}
	if clusterProblem != nil {
		fields = append(fields, *clusterProblem)
	}
	if deref(body.Cluster) == "" {
		fields = append(fields, localPodProblems(spec, "spec")...)
	}
	if len(fields) == 0 {
		if fields, err = s.resolveEndpointModel(ctx, req.Project, body.Name, &spec, "spec"); err != nil {
			return nil, err
		}
	}
	if len(fields) > 0 {
		return nil, invalidEndpointFields(fields)
	}
	err = s.endpoints.Create(ctx, req.Project, body.Name, s.taskQueue, activityQueue, spec)
	if errors.Is(err, endpointclient.ErrExists) {
		return nil, newProblem(ptAlreadyExists, "endpoint %q already exists in project %q", body.Name, req.Project)
	}
	if err != nil {
		return nil, unavailable(err)
	}
	v, err := s.endpointView(ctx, req.Project, body.Name)
	if err != nil {
		return nil, err
	}
	return gen.CreateEndpoint201JSONResponse{Body: v,
		Headers: gen.CreateEndpoint201ResponseHeaders{Location: s.link("/v1/projects/%s/endpoints/%s", req.Project, body.Name)}}, nil
}

// localPodProblems refuses pod settings in the spec of an endpoint on the
// local runtime (created without a cluster), under prefix ("spec" on a
// create, "" on an update): its replicas are processes, not pods, and
// the settings would be silently ignored.
func localPodProblems(spec inference.EndpointSpec, prefix string) []gen.FieldError {
	var out []gen.FieldError
	for _, p := range inference.CheckLocal(spec) {
		path := p.Path
		if prefix != "" {
			path = prefix + "." + path
		}
		out = append(out, gen.FieldError{Path: path, Message: p.Message})
	}
	return out
}

// endpointOnLocalRuntime says whether an endpoint runs on the local
// runtime, as its workflow answers (its activities' queue is not a
// cluster's); false when the answer does not say (a worker from before
// it did), since only a local endpoint is refused anything.
func (s *server) endpointOnLocalRuntime(ctx context.Context, project, name string) (bool, error) {
	st, err := s.endpoints.Status(ctx, project, name)
	if err != nil {
		return false, s.endpointErr(project, name, err)
	}
	return st.TaskQueue != "" && !activities.IsClusterTaskQueue(st.TaskQueue), nil
}

// resolveEndpointModel records in the spec the registry version its
// model.ref names and, before the caller submits the spec, records that
// the endpoint references that version (catalog.ReferenceEndpointModel),
// so that it cannot be deleted from then on; a reference the project's
// registry does not hold, or a version deleted meanwhile, is a problem at
// model.ref under prefix. A reference whose update is then refused is
// removed by the sweeper (internal/services/modelrefs).
func (s *server) resolveEndpointModel(ctx context.Context, project, endpoint string, spec *inference.EndpointSpec, prefix string) ([]gen.FieldError, error) {
	path := "model.ref"
	if prefix != "" {
		path = prefix + "." + path
	}
	if spec.Model.Ref == "" {
		spec.Model.Registered = nil
		return nil, nil
	}
	if s.models == nil {
		return []gen.FieldError{{Path: path, Message: "the model registry is not served by this gateway"}}, nil
	}
	problem, err := catalog.ReferenceEndpointModel(ctx, s.models, s.models, project, endpoint, &spec.Model)
	if err != nil {
		return nil, internalError(err)
	}
	if problem != "" {
		return []gen.FieldError{{Path: path, Message: problem}}, nil
	}
	return nil, nil
}

// prefixed turns problems into field errors under prefix.
func prefixed(problems []schema.Problem, prefix string) []gen.FieldError {
	return views(problems, func(p schema.Problem) gen.FieldError {
		return gen.FieldError{Path: prefix + "." + p.Path, Message: p.Message}
	})
}

// endpointQueue is the task queue of an endpoint's activities: the
// cluster's, which must be registered (else a problem at "cluster", to
// report with the spec's), or the local worker's for "".
func (s *server) endpointQueue(ctx context.Context, cluster string) (string, *gen.FieldError, error) {
	if cluster == "" {
		return s.taskQueue, nil, nil
	}
	if _, err := s.cat.GetCluster(ctx, cluster); errors.Is(err, catalog.ErrNotFound) {
		return "", &gen.FieldError{Path: "cluster", Message: fmt.Sprintf("cluster %q is not registered: an endpoint runs on a cluster whose worker is up (GET /v1/clusters), or on the local runtime without a cluster", cluster)}, nil
	} else if err != nil {
		return "", nil, internalError(err)
	}
	return activities.TaskQueueForCluster(cluster), nil, nil
}

// ListEndpoints lists the project's endpoints.
func (s *server) ListEndpoints(ctx context.Context, req gen.ListEndpointsRequestObject) (gen.ListEndpointsResponseObject, error) {
	if err := s.endpointsOn(); err != nil {
		return nil, err
	}
	list, err := s.endpoints.List(ctx, req.Project)
	if err != nil {
		return nil, unavailable(err)
	}
	items := views(list, func(e endpointclient.Summary) gen.EndpointSummary {
		return gen.EndpointSummary{Name: e.Name, Project: req.Project, CreatedAt: optIf(!e.CreatedAt.IsZero(), e.CreatedAt)}
	})
	if items == nil {
		items = []gen.EndpointSummary{}
	}
	return gen.ListEndpoints200JSONResponse{Items: items}, nil
}

// GetEndpoint answers the endpoint's workflow status.
func (s *server) GetEndpoint(ctx context.Context, req gen.GetEndpointRequestObject) (gen.GetEndpointResponseObject, error) {
	if err := s.endpointsOn(); err != nil {
		return nil, err
	}
	v, err := s.endpointView(ctx, req.Project, req.Endpoint)
	if err != nil {
		return nil, err
	}
	return gen.GetEndpoint200JSONResponse(v), nil
}

// UpdateEndpoint submits a new spec. Pod settings are refused, as on a
// create, when the endpoint runs on the local runtime (asked of its
// workflow only when the spec has them).
func (s *server) UpdateEndpoint(ctx context.Context, req gen.UpdateEndpointRequestObject) (gen.UpdateEndpointResponseObject, error) {
	if err := s.endpointsOn(); err != nil {
		return nil, err
	}
	spec, fields := decodeEndpointSpec(deref(req.Body), "")
	if spec.Pod != nil {
		local, err := s.endpointOnLocalRuntime(ctx, req.Project, req.Endpoint)
		if err != nil {
			return nil, err
		}
		if local {
			fields = append(fields, localPodProblems(spec, "")...)
		}
	}
	if len(fields) == 0 {
		var err error
		if fields, err = s.resolveEndpointModel(ctx, req.Project, req.Endpoint, &spec, ""); err != nil {
			return nil, err
		}
	}
	if len(fields) > 0 {
		return nil, invalidEndpointFields(fields)
	}
	if err := s.endpointErr(req.Project, req.Endpoint, s.endpoints.Update(ctx, req.Project, req.Endpoint, spec)); err != nil {
		return nil, err
	}
	v, err := s.endpointView(ctx, req.Project, req.Endpoint)
	if err != nil {
		return nil, err
	}
	return gen.UpdateEndpoint200JSONResponse(v), nil
}

// DeleteEndpoint starts the endpoint's deletion.
func (s *server) DeleteEndpoint(ctx context.Context, req gen.DeleteEndpointRequestObject) (gen.DeleteEndpointResponseObject, error) {
	if err := s.endpointsOn(); err != nil {
		return nil, err
	}
	submitted := time.Now() // the wall clock, compared with the database's: not the test clock
	if err := s.endpointErr(req.Project, req.Endpoint, s.endpoints.Delete(ctx, req.Project, req.Endpoint)); err != nil {
		return nil, err
	}
	// The workflow accepts no update once deleting, so its references to
	// model versions go now (those recorded before the deletion was
	// submitted: a create of the same name afterwards keeps its own). A
	// failure leaves them to the sweeper.
	if s.models != nil {
		if _, err := s.models.RemoveEndpointModelReferences(ctx, req.Project, req.Endpoint, submitted); err != nil {
			s.log.Warn("cannot remove a deleted endpoint's model references; the sweeper will", zap.String("endpoint", req.Endpoint), zap.Error(err))
		}
	}
	return gen.DeleteEndpoint202Response{}, nil
}

// RollbackEndpoint rolls an earlier revision's spec out as a new revision.
func (s *server) RollbackEndpoint(ctx context.Context, req gen.RollbackEndpointRequestObject) (gen.RollbackEndpointResponseObject, error) {
	if err := s.endpointsOn(); err != nil {
		return nil, err
	}
	if err := s.endpointErr(req.Project, req.Endpoint, s.endpoints.Rollback(ctx, req.Project, req.Endpoint, deref(req.Body).Revision)); err != nil {
		return nil, err
	}
	v, err := s.endpointView(ctx, req.Project, req.Endpoint)
	if err != nil {
		return nil, err
	}
	return gen.RollbackEndpoint200JSONResponse(v), nil
}

// PromoteEndpoint skips the rollout's current pause.
func (s *server) PromoteEndpoint(ctx context.Context, req gen.PromoteEndpointRequestObject) (gen.PromoteEndpointResponseObject, error) {
	v, err := s.commandEndpoint(ctx, req.Project, req.Endpoint, inference.CommandPromote)
	if err != nil {
		return nil, err
	}
	return gen.PromoteEndpoint200JSONResponse(v), nil
}

// AbortEndpoint rolls the rollout back now.
func (s *server) AbortEndpoint(ctx context.Context, req gen.AbortEndpointRequestObject) (gen.AbortEndpointResponseObject, error) {
	v, err := s.commandEndpoint(ctx, req.Project, req.Endpoint, inference.CommandAbort)
	if err != nil {
		return nil, err
	}
	return gen.AbortEndpoint200JSONResponse(v), nil
}

func (s *server) commandEndpoint(ctx context.Context, project, name string, c inference.Command) (gen.Endpoint, error) {
	if err := s.endpointsOn(); err != nil {
		return gen.Endpoint{}, err
	}
	if err := s.endpointErr(project, name, s.endpoints.Command(ctx, project, name, c)); err != nil {
		return gen.Endpoint{}, err
	}
	return s.endpointView(ctx, project, name)
}

func (s *server) endpointsOn() error {
	if s.endpoints == nil {
		return newProblem(ptUnavailable, "inference endpoints are not served by this gateway")
	}
	return nil
}

// endpointErr maps the client's errors to problems.
func (s *server) endpointErr(project, name string, err error) error {
	var rej *endpointclient.RejectedError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, endpointclient.ErrNotFound):
		return notFound("endpoint %q not found in project %q", name, project)
	case errors.As(err, &rej) && len(rej.Problems) > 0:
		return invalidEndpoint(rej.Problems)
	case errors.As(err, &rej):
		return newProblem(ptEndpointBusy, "%s", rej.Message)
	case errors.Is(err, endpointclient.ErrNoAnswer):
		return newProblem(ptUnavailable, "endpoint %q did not answer in time: no worker may be serving its workflow; a change sent now may still apply when one does (GET the endpoint to see)",
			name).withHeader("Retry-After", retryAfterSeconds).withCause(err)
	}
	return newProblem(ptUnavailable, "Temporal is unavailable; retry in a few seconds").
		withHeader("Retry-After", retryAfterSeconds).withCause(err)
}

func (s *server) endpointView(ctx context.Context, project, name string) (gen.Endpoint, error) {
	st, err := s.endpoints.Status(ctx, project, name)
	if err != nil {
		return gen.Endpoint{}, s.endpointErr(project, name, err)
	}
	return endpointView(st, s.endpoints.UIURL(project, name)), nil
}

// decodeEndpointSpec decodes a spec strictly and validates it, returning
// every problem at once with its path under prefix. Fields the spec does
// not have (a typo such as "replica") and values that do not decode are
// problems among the others: the rest of the spec is validated without
// them. A value that does not decode is validated as
// absent (its default), and what validation says at its path or inside it
// is left out, since it would be about the default, not about what was
// written. Problems that decoding finds come first, in path order; then
// validation's, in its order.
func decodeEndpointSpec(raw json.RawMessage, prefix string) (inference.EndpointSpec, []gen.FieldError) {
	var spec inference.EndpointSpec
	var fields []gen.FieldError
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		// Say where, for every bad value, not only the first.
		var rest json.RawMessage
		fields, rest = decodeProblems(raw, reflect.TypeFor[inference.EndpointSpec](), prefix)
		if len(fields) == 0 {
			return spec, []gen.FieldError{{Path: orBody(prefix), Message: specDecodeMessage(err)}}
		}
		spec = inference.EndpointSpec{}
		for _, f := range fields {
			if f.Path == orBody(prefix) {
				return spec, fields // not an object: nothing else to check
			}
		}
		if err := json.Unmarshal(rest, &spec); err != nil {
			return spec, fields // cannot happen: rest is what decodes
		}
	}
	var ve *schema.ValidationError
	if err := inference.Validate(spec); errors.As(err, &ve) {
	problems:
		for _, p := range ve.Problems {
			path := p.Path
			if prefix != "" {
				path = prefix + "." + path
			}
			for _, f := range fields {
				if covers(f.Path, path) {
					continue problems
				}
			}
			fields = append(fields, gen.FieldError{Path: path, Message: p.Message})
		}
	}
	return spec, fields
}

func invalidEndpoint(problems []schema.Problem) error {
	return invalidEndpointFields(views(problems, func(p schema.Problem) gen.FieldError { return gen.FieldError{Path: p.Path, Message: p.Message} }))
}

func invalidEndpointFields(fields []gen.FieldError) error {
	return newProblem(ptInvalidEndpoint, "%s", summarize(fields)).withErrors(fields)
}

// specDecodeMessage says what is wrong with a spec's JSON: an unknown field
// (a typo) or a field of the wrong type, named by its path.
func specDecodeMessage(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field == "" { // a leaf, already named by its path
		return fmt.Sprintf("expected %s, got a JSON %s", te.Type, te.Value)
	}
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q: expected %s, got a JSON %s", te.Field, te.Type, te.Value)
	}
	return err.Error() // "json: unknown field \"x\"", or a Duration's own message
}
