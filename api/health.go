package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/api/gen"
)

// Pinger checks the catalogue's database connection.
type Pinger interface {
	Ping(ctx context.Context) error
}

// readyTimeout bounds each readiness check so a hung dependency reports
// "down" instead of hanging the probe.
const readyTimeout = 2 * time.Second

// GetHealthz is liveness: answering at all is the signal.
func (s *server) GetHealthz(context.Context, gen.GetHealthzRequestObject) (gen.GetHealthzResponseObject, error) {
	return gen.GetHealthz200JSONResponse{Status: gen.Ok}, nil
}

// GetReadyz checks the database and Temporal concurrently.
func (s *server) GetReadyz(ctx context.Context, _ gen.GetReadyzRequestObject) (gen.GetReadyzResponseObject, error) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	type result struct {
		name string
		err  error
	}
	results := make(chan result, 2)
	go func() { results <- result{"database", s.cat.Ping(ctx)} }()
	go func() { results <- result{"temporal", s.eng.Health(ctx)} }()

	checks := map[string]string{}
	var down []gen.FieldError
	for range 2 {
		r := <-results
		if r.err != nil {
			// The cause may name hosts or credentials: log it, do not send it.
			s.log.Warn("readiness check failed", zap.String("check", r.name), zap.Error(r.err))
			checks[r.name] = "unavailable"
			down = append(down, gen.FieldError{Path: r.name, Message: "unavailable"})
			continue
		}
		checks[r.name] = "ok"
	}
	if len(down) > 0 {
		slices.SortFunc(down, func(a, b gen.FieldError) int { return strings.Compare(a.Path, b.Path) })
		return nil, newProblem(ptUnavailable, "not ready: %s", summarize(down)).withErrors(down).withHeader("Retry-After", retryAfterSeconds)
	}
	return gen.GetReadyz200JSONResponse{Status: gen.Ok, Checks: &checks}, nil
}

// GetMetrics serves Prometheus metrics (no auth: scrapers have no token).
func (s *server) GetMetrics(ctx context.Context, _ gen.GetMetricsRequestObject) (gen.GetMetricsResponseObject, error) {
	r := requestFrom(ctx)
	if r == nil {
		return nil, internalError(errors.New("metrics: no request in context"))
	}
	return metricsResponse{h: s.metrics.handler, r: r}, nil
}

// metricsResponse lets promhttp write the response: it negotiates the
// exposition format and compression from the scraper's request.
type metricsResponse struct {
	h http.Handler
	r *http.Request
}

func (m metricsResponse) VisitGetMetricsResponse(w http.ResponseWriter) error {
	m.h.ServeHTTP(w, m.r)
	return nil
}

// GetOpenAPI serves the embedded spec, so clients and the docs can never
// disagree with what the validator enforces.
func (s *server) GetOpenAPI(context.Context, gen.GetOpenAPIRequestObject) (gen.GetOpenAPIResponseObject, error) {
	return specResponse(s.specJSON), nil
}

// specResponse sends the spec's JSON as encoded once at start (the
// generated response type would re-encode it from a map).
type specResponse []byte

func (b specResponse) VisitGetOpenAPIResponse(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(b)
	return err
}
