package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHealthz(t *testing.T) {
	h := newHarness(t)
	r := h.do("GET", "/healthz", "", nil)
	wantStatus(t, r, http.StatusOK)
}

func TestReadyz(t *testing.T) {
	h := newHarness(t)
	r := h.do("GET", "/readyz", "", nil)
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(string(r.body), `"database":"ok"`) || !strings.Contains(string(r.body), `"temporal":"ok"`) {
		t.Fatalf("checks missing: %s", r.body)
	}

	h.cat.pingErr = errString("dial tcp 10.0.0.5:5432: connection refused")
	r = h.do("GET", "/readyz", "", nil)
	p := wantProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	if got := errorPaths(p); len(got) != 1 || got[0] != "database" {
		t.Fatalf("errors %v", got)
	}
	if strings.Contains(string(r.body), "10.0.0.5") {
		t.Fatalf("readyz leaks the cause: %s", r.body)
	}
}

func TestOpenAPIServed(t *testing.T) {
	h := newHarness(t)
	r := h.do("GET", "/openapi.json", "", nil)
	wantStatus(t, r, http.StatusOK)
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	r.json(t, &doc)
	if !strings.HasPrefix(doc.OpenAPI, "3.0") || doc.Paths["/v1/projects/{project}/runs"] == nil {
		t.Fatalf("unexpected document: %.200s", r.body)
	}
}

func TestMetricsWithoutAuth(t *testing.T) {
	h := newHarness(t)
	h.do("GET", "/v1/projects", h.admin, nil)
	h.do("GET", "/v1/projects", "", nil)
	r := h.do("GET", "/metrics", "", nil)
	wantStatus(t, r, http.StatusOK)
	for _, want := range []string{
		`atelier_http_requests_total{method="GET",route="/v1/projects",status="200"} 1`,
		`atelier_http_requests_total{method="GET",route="/v1/projects",status="401"} 1`,
		`atelier_http_request_duration_seconds_bucket{method="GET",route="/v1/projects"`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestPanicBecomesProblem(t *testing.T) {
	h := newHarness(t)
	h.cat.panicOnList = true
	r := h.do("GET", "/v1/projects/alpha/pipelines", h.viewer, nil)
	p := wantProblem(t, r, http.StatusInternalServerError, "internal")
	if strings.Contains(string(r.body), "hunter2") || strings.Contains(string(r.body), "panic") {
		t.Fatalf("500 leaks internals: %s", r.body)
	}
	if !strings.Contains(*p.Detail, r.Header.Get("X-Request-Id")) {
		t.Fatalf("detail lacks the request ID: %s", *p.Detail)
	}
	if h.logs.FilterMessage("panic in handler").Len() != 1 {
		t.Fatal("panic not logged")
	}
	// The server keeps serving.
	h.cat.panicOnList = false
	wantStatus(t, h.do("GET", "/v1/projects/alpha/pipelines", h.viewer, nil), http.StatusOK)
}

func TestUnknownRouteAndMethod(t *testing.T) {
	h := newHarness(t)
	wantProblem(t, h.do("GET", "/v1/nope", h.admin, nil), http.StatusNotFound, "not-found")
	wantProblem(t, h.do("PATCH", "/v1/projects", h.admin, nil), http.StatusMethodNotAllowed, "method-not-allowed")
}

// TestEveryV1RouteNeedsAToken guards against a route whose spec entry lost
// its security: every /v1 route must answer 401 without a token.
func TestEveryV1RouteNeedsAToken(t *testing.T) {
	h := newHarness(t, WithTriggers(newFakeTriggers()))
	e, err := New(newFakeCatalog(), newFakeEngine(), WithRegistry(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	fill := strings.NewReplacer(":project", "alpha", ":pipeline", "train", ":run", runID1,
		":token", runID1, ":step", "fit", ":version", "1")
	n := 0
	for _, rt := range e.Routes() {
		if !strings.HasPrefix(rt.Path, "/v1") {
			continue
		}
		n++
		var body any
		if strings.HasPrefix(rt.Path, "/v1/hooks/") {
			// Signed instead of a token: a request without the
			// signature is as unauthenticated.
			body = map[string]any{}
		}
		r := h.do(rt.Method, fill.Replace(rt.Path), "", body)
		wantProblem(t, r, http.StatusUnauthorized, "unauthenticated")
	}
	if n < 15 {
		t.Fatalf("only %d /v1 routes registered", n)
	}
}

const runID1 = "01970000-0000-7000-8000-000000000001"

type errString string

func (e errString) Error() string { return string(e) }
