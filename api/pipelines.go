package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strconv"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/schema"
)

// PipelineStore keeps declarative pipelines and their immutable versions.
type PipelineStore interface {
	// CreatePipelineVersion adds a version unless digest equals the newest
	// version's, in which case it returns that version and created=false.
	CreatePipelineVersion(ctx context.Context, project, pipeline string, spec json.RawMessage, digest, createdBy string) (catalog.PipelineVersion, bool, error)
	GetPipeline(ctx context.Context, project, name string) (catalog.Pipeline, error)
	ListPipelines(ctx context.Context, project string) ([]catalog.Pipeline, error)
	// GetPipelineVersion returns the newest version when version is 0.
	GetPipelineVersion(ctx context.Context, project, name string, version int) (catalog.PipelineVersion, error)
}

// GoWorkflowStore lists native Go pipelines that workers registered.
type GoWorkflowStore interface {
	ListGoWorkflows(ctx context.Context) ([]catalog.GoWorkflow, error)
	GetGoWorkflow(ctx context.Context, name string) (catalog.GoWorkflow, error)
}

// CreatePipelineVersion parses and validates a spec (JSON or YAML) and
// stores its canonical JSON. The operation is x-atelier-raw-body: the
// validator checked only its content type, and the body reaches this
// handler as bytes (JSON, see Bind) or as a reader (YAML), whole: the spec
// parser reports every problem with its path (422).
func (s *server) CreatePipelineVersion(ctx context.Context, req gen.CreatePipelineVersionRequestObject) (gen.CreatePipelineVersionResponseObject, error) {
	var data []byte
	switch {
	case req.JSONBody != nil:
		data = *req.JSONBody
	case req.Body != nil:
		var err error
		if data, err = io.ReadAll(req.Body); err != nil {
			return nil, newProblem(ptMalformed, "could not read the request body")
		}
	default: // the validator refused other content types
		return nil, newProblem(ptUnsupportedMedia, "send the spec as application/json or application/yaml")
	}
	if len(data) > pipeline.MaxSpecBytes {
		return nil, newProblem(ptTooLarge, "pipeline spec is %d bytes; the limit is %d", len(data), pipeline.MaxSpecBytes)
	}
	p, err := pipeline.Parse(data)
	if err != nil {
		return nil, specProblem(err)
	}
	opts, err := s.validateOptions(ctx)
	if err != nil {
		return nil, internalError(err)
	}
	var found []schema.Problem
	if err := pipeline.Validate(p, opts); err != nil {
		var ve *schema.ValidationError
		if !errors.As(err, &ve) {
			return nil, specProblem(err)
		}
		found = ve.Problems
	}
	steps, err := s.checkPipelineSteps(ctx, req.Project, req.Pipeline, p)
	if err != nil {
		return nil, internalError(err)
	}
	if found = append(found, steps...); len(found) > 0 {
		pipeline.SortProblems(found)
		return nil, specProblem(&schema.ValidationError{Subject: "pipeline", Problems: found})
	}
	// Canonical form: struct field order and sorted map keys, so formatting,
	// YAML vs JSON and key order do not make new versions.
	canonical, err := json.Marshal(p)
	if err != nil {
		return nil, internalError(err)
	}
	sum := sha256.Sum256(canonical)
	digest := "sha256:" + hex.EncodeToString(sum[:])

	v, created, err := s.cat.CreatePipelineVersion(ctx, req.Project, req.Pipeline, canonical, digest, principal(ctx).Name)
	if err != nil {
		return nil, internalError(err)
	}
	if !created {
		return gen.CreatePipelineVersion200JSONResponse(pipelineVersionView(v)), nil
	}
	return gen.CreatePipelineVersion201JSONResponse{
		Body: pipelineVersionView(v),
		Headers: gen.CreatePipelineVersion201ResponseHeaders{
			Location: s.link("/v1/projects/%s/pipelines/%s/versions/%d", req.Project, req.Pipeline, v.Version),
		},
	}, nil
}

// specProblem reports every spec problem with its path.
func specProblem(err error) error {
	var ve *schema.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) == 0 {
		return newProblem(ptInvalidSpec, "%s", err.Error())
	}
	return newProblem(ptInvalidSpec, "%s", summarize(fieldErrors(ve.Problems))).withErrors(fieldErrors(ve.Problems))
}

func fieldErrors(ps []schema.Problem) []gen.FieldError {
	return views(ps, func(p schema.Problem) gen.FieldError { return gen.FieldError{Path: p.Path, Message: p.Message} })
}

// ListPipelines lists a project's pipelines with their newest version.
func (s *server) ListPipelines(ctx context.Context, req gen.ListPipelinesRequestObject) (gen.ListPipelinesResponseObject, error) {
	list, err := s.cat.ListPipelines(ctx, req.Project)
	if err != nil {
		return nil, internalError(err)
	}
	return gen.ListPipelines200JSONResponse{Pipelines: pipelineViews(list)}, nil
}

// GetPipeline returns one pipeline's summary.
func (s *server) GetPipeline(ctx context.Context, req gen.GetPipelineRequestObject) (gen.GetPipelineResponseObject, error) {
	p, err := s.cat.GetPipeline(ctx, req.Project, req.Pipeline)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, notFound("pipeline %q not found in project %q", req.Pipeline, req.Project)
	}
	if err != nil {
		return nil, internalError(err)
	}
	return gen.GetPipeline200JSONResponse(pipelineView(p)), nil
}

// GetPipelineVersion returns a version ("latest" or a number) with its spec.
func (s *server) GetPipelineVersion(ctx context.Context, req gen.GetPipelineVersionRequestObject) (gen.GetPipelineVersionResponseObject, error) {
	n := 0 // latest
	if req.Version != "latest" {
		var err error
		if n, err = strconv.Atoi(req.Version); err != nil || n < 1 {
			return nil, newProblem(ptInvalid, "version must be a positive number or \"latest\"")
		}
	}
	v, err := s.cat.GetPipelineVersion(ctx, req.Project, req.Pipeline, n)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, notFound("pipeline %q has no version %s in project %q", req.Pipeline, req.Version, req.Project)
	}
	if err != nil {
		return nil, internalError(err)
	}
	return gen.GetPipelineVersion200JSONResponse(pipelineVersionView(v)), nil
}

// ListWorkflows lists native Go pipelines; they are global, not per project.
func (s *server) ListWorkflows(ctx context.Context, _ gen.ListWorkflowsRequestObject) (gen.ListWorkflowsResponseObject, error) {
	list, err := s.cat.ListGoWorkflows(ctx)
	if err != nil {
		return nil, internalError(err)
	}
	return gen.ListWorkflows200JSONResponse{Workflows: goWorkflowViews(list)}, nil
}
