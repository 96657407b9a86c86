package api

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Each request is one server span named by its route, with method, route
// and status and nothing of the request's token; unmatched paths are named
// by their method alone, and a caller's traceparent is continued.
func TestTracingSpansPerRequest(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	h := newHarness(t, WithTracing(tp))

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h.do("GET", "/v1/projects/alpha/runs", h.editor, nil, "traceparent", parent)
	h.do("GET", "/v1/projects/alpha/runs", "", nil)
	h.do("GET", "/v1/no-such-thing", h.editor, nil)

	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("got %d spans, want one per request: %v", len(spans), spans)
	}
	want := []struct {
		name, route, status string
	}{
		{"GET /v1/projects/:project/runs", "/v1/projects/:project/runs", "200"},
		{"GET /v1/projects/:project/runs", "/v1/projects/:project/runs", "401"},
		{"GET", "", "404"},
	}
	for i, sp := range spans {
		attrs := map[string]string{}
		for _, a := range sp.Attributes {
			attrs[string(a.Key)] = a.Value.Emit()
			if strings.Contains(a.Value.Emit(), h.editor) || strings.Contains(strings.ToLower(string(a.Key)), "authorization") {
				t.Errorf("span %s carries the token: %s", sp.Name, a.Key)
			}
		}
		w := want[i]
		if sp.Name != w.name || attrs["http.route"] != w.route || attrs["http.response.status_code"] != w.status || attrs["http.request.method"] != "GET" {
			t.Errorf("span %d: %s %v, want %s route %q status %s", i, sp.Name, attrs, w.name, w.route, w.status)
		}
		if sp.Status.Code == codes.Error {
			t.Errorf("span %s: a 4xx is the caller's error, not the server's", sp.Name)
		}
	}
	if got := spans[0].Parent.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" || !spans[0].Parent.IsRemote() {
		t.Errorf("the caller's traceparent was not continued: parent %v", spans[0].Parent)
	}
	if spans[1].Parent.IsValid() {
		t.Errorf("a request without traceparent starts a trace: parent %v", spans[1].Parent)
	}
}
