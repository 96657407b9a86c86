package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// problemBase prefixes every problem type; docs/api.md lists the slugs.
// Clients compare type strings; they need not dereference them.
const problemBase = "https://atelier-ml.dev/problems/"

// problemType is one row of the problem types table in docs/api.md.
type problemType struct {
	slug   string
	title  string
	status int
}

var (
	ptMalformed         = problemType{"malformed-request", "Malformed request", http.StatusBadRequest}
	ptInvalid           = problemType{"invalid-request", "Invalid request", http.StatusBadRequest}
	ptUnauthenticated   = problemType{"unauthenticated", "Authentication required", http.StatusUnauthorized}
	ptForbidden         = problemType{"forbidden", "Forbidden", http.StatusForbidden}
	ptNotFound          = problemType{"not-found", "Not found", http.StatusNotFound}
	ptMethodNotAllowed  = problemType{"method-not-allowed", "Method not allowed", http.StatusMethodNotAllowed}
	ptAlreadyExists     = problemType{"already-exists", "Already exists", http.StatusConflict}
	ptIdempotencyReused = problemType{"idempotency-key-reused", "Idempotency key reused", http.StatusConflict}
	ptRunFinished       = problemType{"run-finished", "Run not running", http.StatusConflict}
	ptStepNotWaiting    = problemType{"step-not-waiting", "Step not waiting for approval", http.StatusConflict}
	ptCommentRequired   = problemType{"comment-required", "Comment required", http.StatusUnprocessableEntity}
	ptTooLarge          = problemType{"payload-too-large", "Payload too large", http.StatusRequestEntityTooLarge}
	ptUnsupportedMedia  = problemType{"unsupported-media-type", "Unsupported media type", http.StatusUnsupportedMediaType}
	ptInvalidSpec       = problemType{"invalid-spec", "Invalid pipeline spec", http.StatusUnprocessableEntity}
	ptInvalidParams     = problemType{"invalid-params", "Invalid run parameters", http.StatusUnprocessableEntity}
	ptInvalidTargets    = problemType{"invalid-targets", "Invalid run targets", http.StatusUnprocessableEntity}
	ptInvalidPolicy     = problemType{"invalid-gpu-policy", "Invalid GPU policy", http.StatusUnprocessableEntity}
	ptInternal          = problemType{"internal", "Internal server error", http.StatusInternalServerError}
	ptUnavailable       = problemType{"unavailable", "Service unavailable", http.StatusServiceUnavailable}
	ptTooManyStreams    = problemType{"too-many-streams", "Too many open streams", http.StatusTooManyRequests}
	ptArtifactLimit     = problemType{"artifact-limit", "Project artifact limit reached", http.StatusInsufficientStorage}
)

// problem is an error that the error handler renders as problem+json.
// Handlers return it; nothing else reaches clients.
type problem struct {
	body   gen.Problem
	header http.Header // extra response headers, e.g. WWW-Authenticate
	cause  error       // logged for 5xx, never sent
}

func (p *problem) Error() string { return p.body.Type + ": " + deref(p.body.Detail) }

func newProblem(pt problemType, format string, args ...any) *problem {
	detail := fmt.Sprintf(format, args...)
	return &problem{body: gen.Problem{
		Type:   problemBase + pt.slug,
		Title:  pt.title,
		Status: pt.status,
		Detail: &detail,
	}}
}

func (p *problem) withErrors(errs []gen.FieldError) *problem {
	if len(errs) > 0 {
		p.body.Errors = &errs
	}
	return p
}

func (p *problem) withHeader(k, v string) *problem {
	if p.header == nil {
		p.header = http.Header{}
	}
	p.header.Set(k, v)
	return p
}

func (p *problem) withCause(err error) *problem {
	p.cause = err
	return p
}

// internalError hides err from the client and keeps it for the log. A
// catalogue that cannot be reached is a 503 the client may retry, not a 500.
func internalError(err error) *problem {
	if errors.Is(err, catalog.ErrUnavailable) {
		return unavailable(err)
	}
	return newProblem(ptInternal, "an unexpected error occurred; it has been logged").withCause(err)
}

// retryAfterSeconds is what a 503 asks clients to wait: about the time a
// Postgres restart or failover takes.
const retryAfterSeconds = "5"

func unavailable(err error) *problem {
	return newProblem(ptUnavailable, "the catalogue database is unavailable; retry in a few seconds").
		withHeader("Retry-After", retryAfterSeconds).withCause(err)
}

// notFound is the single wording for missing and foreign resources alike, so
// a response never tells whether another tenant's resource exists.
func notFound(format string, args ...any) *problem {
	return newProblem(ptNotFound, format, args...)
}

// handleError is echo's HTTPErrorHandler: every error leaves as a problem.
func (s *server) handleError(err error, c echo.Context) {
	p := s.toProblem(err)
	reqID := c.Response().Header().Get(echo.HeaderXRequestID)
	if p.body.Status >= 500 {
		s.log.Error("request failed", zap.String("request_id", reqID),
			zap.String("method", c.Request().Method), zap.String("path", c.Request().URL.Path),
			zap.Int("status", p.body.Status), zap.Error(p.cause))
		if p.body.Status == http.StatusInternalServerError && reqID != "" {
			d := fmt.Sprintf("an unexpected error occurred; it has been logged with request ID %s", reqID)
			p.body.Detail = &d
		}
	}
	if c.Response().Committed {
		// A stream already started; the status line is gone.
		s.log.Warn("error after response started", zap.String("request_id", reqID), zap.Error(err))
		return
	}
	inst := c.Request().URL.Path
	p.body.Instance = &inst
	h := c.Response().Header()
	for k, vs := range p.header {
		h[k] = vs
	}
	h.Set(echo.HeaderContentType, "application/problem+json")
	c.Response().WriteHeader(p.body.Status)
	if c.Request().Method != http.MethodHead {
		_ = json.NewEncoder(c.Response()).Encode(p.body)
	}
}

// toProblem maps any error to a problem; echo's own errors (no route, wrong
// method, parameter binding in generated code) get precise types.
func (s *server) toProblem(err error) *problem {
	var p *problem
	if errors.As(err, &p) {
		return p
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg := fmt.Sprint(he.Message)
		switch he.Code {
		case http.StatusNotFound:
			return notFound("no such route")
		case http.StatusMethodNotAllowed:
			return newProblem(ptMethodNotAllowed, "this route does not support the method")
		case http.StatusRequestEntityTooLarge:
			return newProblem(ptTooLarge, "request body exceeds the %d-byte limit", s.bodyLimit)
		case http.StatusUnsupportedMediaType:
			return newProblem(ptUnsupportedMedia, "%s", msg)
		case http.StatusBadRequest:
			// Generated parameter binding: "Invalid format for parameter x: ...".
			return newProblem(ptInvalid, "%s", msg)
		}
		if he.Code >= 400 && he.Code < 500 {
			return &problem{body: gen.Problem{
				Type: "about:blank", Title: http.StatusText(he.Code), Status: he.Code, Detail: &msg,
			}}
		}
		return internalError(err)
	}
	return internalError(err)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func ptr[T any](v T) *T { return &v }
