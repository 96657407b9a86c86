package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/inference/proxy"
)

// oneRoute resolves every endpoint "chat" of project alpha to one URL.
type oneRoute struct{ url string }

func (r oneRoute) Resolve(_ context.Context, project, endpoint string) (proxy.Route, error) {
	if project != "alpha" || endpoint != "chat" {
		return proxy.Route{}, proxy.ErrNotFound
	}
	if r.url == "" {
		return proxy.Route{Targets: []proxy.Target{{Revision: 1, Weight: 100}}}, nil
	}
	return proxy.Route{Targets: []proxy.Target{{Revision: 1, Weight: 100, URLs: []string{r.url}}}}, nil
}

func (oneRoute) Report(context.Context, string, string, proxy.Report) error { return nil }

// Requests to an endpoint's engine API are forwarded with the path after
// the endpoint and without the caller's token; they need a token that
// sees the project (a viewer's will do), and another tenant's token is
// answered exactly as for a missing project.
func TestInvokeEndpoint(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "%s %s auth=%q", r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"))
	}))
	t.Cleanup(engine.Close)
	h := newHarness(t, WithEndpointProxy(mustProxy(t, oneRoute{engine.URL}, proxy.Options{})))

	r := h.do(http.MethodPost, "/v1/projects/alpha/endpoints/chat/v1/chat/completions?x=1", h.viewer, `{"model":"tiny"}`)
	wantStatus(t, r, http.StatusOK)
	if got := string(r.body); got != `POST /v1/chat/completions?x=1 auth=""` {
		t.Errorf("engine saw %s", got)
	}
	if r.Header.Get(proxy.RevisionHeader) != "1" {
		t.Errorf("revision header %q", r.Header.Get(proxy.RevisionHeader))
	}
	r = h.do(http.MethodGet, "/v1/projects/alpha/endpoints/chat/v2/health/ready", h.editor, nil)
	wantStatus(t, r, http.StatusOK)

	wantProblem(t, h.do(http.MethodPost, "/v1/projects/alpha/endpoints/chat/v1/completions", "", "{}"), http.StatusUnauthorized, "unauthenticated")
	p := wantProblem(t, h.do(http.MethodPost, "/v1/projects/alpha/endpoints/chat/v1/completions", h.betaEditor, "{}"), http.StatusNotFound, "not-found")
	if *p.Detail != `project "alpha" not found` {
		t.Errorf("detail %q", *p.Detail)
	}
	wantProblem(t, h.do(http.MethodPost, "/v1/projects/alpha/endpoints/other/v1/completions", h.viewer, "{}"), http.StatusNotFound, "not-found")
}

func mustProxy(t *testing.T, r oneRoute, o proxy.Options) *proxy.Proxy {
	t.Helper()
	p, err := proxy.New(r, oneRoute{}, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// An endpoint with no ready replica holds the request up to the proxy's
// limit, then answers 503 with Retry-After as problem+json.
func TestInvokeEndpointNotReady(t *testing.T) {
	h := newHarness(t, WithEndpointProxy(mustProxy(t, oneRoute{}, proxy.Options{MaxHold: 100 * time.Millisecond})))
	r := h.do(http.MethodPost, "/v1/projects/alpha/endpoints/chat/v1/completions", h.viewer, "{}")
	p := wantProblem(t, r, http.StatusServiceUnavailable, "endpoint-not-ready")
	if r.Header.Get("Retry-After") != "5" {
		t.Errorf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	t.Log(*p.Detail)
}
