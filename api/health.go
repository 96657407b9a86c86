package api

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
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
func (s *server) GetHealthz(c echo.Context) error {
	return c.JSON(http.StatusOK, gen.Health{Status: "ok"})
}

// GetReadyz checks the database and Temporal concurrently.
func (s *server) GetReadyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
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
		return newProblem(ptUnavailable, "not ready: %s", summarize(down)).withErrors(down).withHeader("Retry-After", retryAfterSeconds)
	}
	return c.JSON(http.StatusOK, gen.Health{Status: "ok", Checks: &checks})
}

// GetMetrics serves Prometheus metrics (no auth: scrapers have no token).
func (s *server) GetMetrics(c echo.Context) error {
	s.metrics.handler.ServeHTTP(c.Response(), c.Request())
	return nil
}

// GetOpenAPI serves the embedded spec, so clients and the docs can never
// disagree with what the validator enforces.
func (s *server) GetOpenAPI(c echo.Context) error {
	return c.JSONBlob(http.StatusOK, s.specJSON)
}
