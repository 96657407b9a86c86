package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/workflows/spec"
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

var specMediaTypes = map[string]bool{
	"application/json":   true,
	"application/yaml":   true,
	"application/x-yaml": true,
}

// CreatePipelineVersion parses and validates a spec (JSON or YAML) and
// stores its canonical JSON. The validator skipped this body
// (x-atelier-raw-body), so content type and size are checked here.
func (s *server) CreatePipelineVersion(c echo.Context, project, pipeline string) error {
	mt, _, err := mime.ParseMediaType(c.Request().Header.Get(echo.HeaderContentType))
	if err != nil || !specMediaTypes[mt] {
		return newProblem(ptUnsupportedMedia, "send the spec as application/json or application/yaml")
	}
	data, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return newProblem(ptMalformed, "could not read the request body")
	}
	if len(data) > spec.MaxSpecBytes {
		return newProblem(ptTooLarge, "pipeline spec is %d bytes; the limit is %d", len(data), spec.MaxSpecBytes)
	}
	p, err := spec.Parse(data)
	if err != nil {
		return specProblem(err)
	}
	opts, err := s.validateOptions(c.Request().Context())
	if err != nil {
		return internalError(err)
	}
	if err := spec.Validate(p, opts); err != nil {
		return specProblem(err)
	}
	// Canonical form: struct field order and sorted map keys, so formatting,
	// YAML vs JSON and key order do not make new versions.
	canonical, err := json.Marshal(p)
	if err != nil {
		return internalError(err)
	}
	sum := sha256.Sum256(canonical)
	digest := "sha256:" + hex.EncodeToString(sum[:])

	v, created, err := s.cat.CreatePipelineVersion(c.Request().Context(), project, pipeline, canonical, digest, principal(c).Name)
	if err != nil {
		return internalError(err)
	}
	if !created {
		return c.JSON(http.StatusOK, v)
	}
	c.Response().Header().Set(echo.HeaderLocation,
		s.link("/v1/projects/%s/pipelines/%s/versions/%d", project, pipeline, v.Version))
	return c.JSON(http.StatusCreated, v)
}

// specProblem reports every spec problem with its path.
func specProblem(err error) error {
	var ve *spec.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) == 0 {
		return newProblem(ptInvalidSpec, "%s", err.Error())
	}
	return newProblem(ptInvalidSpec, "%s", summarize(fieldErrors(ve.Problems))).withErrors(fieldErrors(ve.Problems))
}

func fieldErrors(ps []spec.Problem) []gen.FieldError {
	out := make([]gen.FieldError, len(ps))
	for i, p := range ps {
		out[i] = gen.FieldError{Path: p.Path, Message: p.Message}
	}
	return out
}

// ListPipelines lists a project's pipelines with their newest version.
func (s *server) ListPipelines(c echo.Context, project string) error {
	list, err := s.cat.ListPipelines(c.Request().Context(), project)
	if err != nil {
		return internalError(err)
	}
	if list == nil {
		list = []catalog.Pipeline{}
	}
	return c.JSON(http.StatusOK, gen.PipelineList{Pipelines: list})
}

// GetPipeline returns one pipeline's summary.
func (s *server) GetPipeline(c echo.Context, project, pipeline string) error {
	p, err := s.cat.GetPipeline(c.Request().Context(), project, pipeline)
	if errors.Is(err, catalog.ErrNotFound) {
		return notFound("pipeline %q not found in project %q", pipeline, project)
	}
	if err != nil {
		return internalError(err)
	}
	return c.JSON(http.StatusOK, p)
}

// GetPipelineVersion returns a version ("latest" or a number) with its spec.
func (s *server) GetPipelineVersion(c echo.Context, project, pipeline, version string) error {
	n := 0 // latest
	if version != "latest" {
		var err error
		if n, err = strconv.Atoi(version); err != nil || n < 1 {
			return newProblem(ptInvalid, "version must be a positive number or \"latest\"")
		}
	}
	v, err := s.cat.GetPipelineVersion(c.Request().Context(), project, pipeline, n)
	if errors.Is(err, catalog.ErrNotFound) {
		return notFound("pipeline %q has no version %s in project %q", pipeline, version, project)
	}
	if err != nil {
		return internalError(err)
	}
	return c.JSON(http.StatusOK, v)
}

// ListWorkflows lists native Go pipelines; they are global, not per project.
func (s *server) ListWorkflows(c echo.Context) error {
	list, err := s.cat.ListGoWorkflows(c.Request().Context())
	if err != nil {
		return internalError(err)
	}
	if list == nil {
		list = []catalog.GoWorkflow{}
	}
	return c.JSON(http.StatusOK, gen.GoWorkflowList{Workflows: list})
}
