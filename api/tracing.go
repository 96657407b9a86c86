package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// WithTracing opens a server span per request on tp (default nil: no
// tracing, and no middleware at all). Handlers pass the request context
// on, so the Temporal client's spans (StartWorkflow, …) become children of
// the request's.
func WithTracing(tp trace.TracerProvider) Option {
	return func(s *server) {
		if tp != nil {
			s.tracer = tp.Tracer("github.com/atelier-ml/atelier/api")
		}
	}
}

// traceParent reads a caller's W3C traceparent, so a client that traces
// its own calls sees the gateway's spans in its trace (and its sampling
// decision is followed: the sampler is parent-based).
var traceParent = propagation.TraceContext{}

// trace wraps a request in a server span named by its route. It records
// method, route and final status only: never headers (the token) or
// bodies. Unmatched paths are named by their method alone, as in the
// metrics, so span names stay a bounded set.
func (s *server) trace(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		name, attrs := req.Method, []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(req.Method)}
		if _, ok := s.routes[routeKey(c)]; ok {
			name += " " + c.Path()
			attrs = append(attrs, semconv.HTTPRoute(c.Path()))
		}
		ctx := traceParent.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
		ctx, span := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		defer span.End()
		c.SetRequest(req.WithContext(ctx))
		err := next(c)
		status := c.Response().Status
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		if status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		return err
	}
}
