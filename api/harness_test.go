package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// harness runs the real echo server over HTTP against the fakes, and checks
// every response against openapi.yaml (status, content type, body schema),
// so the spec cannot drift from the implementation.
type harness struct {
	t      *testing.T
	cat    *fakeCatalog
	eng    *fakeEngine
	srv    *httptest.Server
	router routers.Router
	logs   *observer.ObservedLogs
	ticks  atomic.Int64

	admin, editor, viewer, betaEditor string // secrets
	editorTok                         catalog.Token
}

func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	h := &harness{t: t, cat: newFakeCatalog(), eng: newFakeEngine()}
	core, logs := observer.New(zap.DebugLevel)
	h.logs = logs
	// The clock advances a second per reading so runs sort by creation.
	clock := func() time.Time { return t0.Add(time.Duration(h.ticks.Add(1)) * time.Second) }
	base := []Option{
		WithLogger(zap.New(core)), WithClock(clock), WithRegistry(prometheus.NewRegistry()),
		WithPollInterval(10 * time.Millisecond), WithQueryTimeout(200 * time.Millisecond),
	}
	e, err := New(h.cat, h.eng, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = httptest.NewServer(e)
	t.Cleanup(h.srv.Close)

	doc, err := gen.GetSwagger()
	if err != nil {
		t.Fatal(err)
	}
	doc.Servers = nil
	if h.router, err = gorillamux.NewRouter(doc); err != nil {
		t.Fatal(err)
	}

	for _, p := range []string{"alpha", "beta"} {
		h.cat.projects[p] = catalog.Project{Name: p, CreatedAt: t0}
	}
	h.admin = h.token(catalog.Token{ID: "00000000-0000-7000-8000-000000000001", Name: "root", Role: tokens.RoleAdmin})
	h.editorTok = catalog.Token{ID: "00000000-0000-7000-8000-000000000002", Name: "ci", Project: "alpha", Role: tokens.RoleEditor}
	h.editor = h.token(h.editorTok)
	h.viewer = h.token(catalog.Token{ID: "00000000-0000-7000-8000-000000000003", Name: "dash", Project: "alpha", Role: tokens.RoleViewer})
	h.betaEditor = h.token(catalog.Token{ID: "00000000-0000-7000-8000-000000000004", Name: "ci", Project: "beta", Role: tokens.RoleEditor})
	return h
}

// token stores a token and returns its secret.
func (h *harness) token(t catalog.Token) string {
	secret, hash := tokens.New()
	if _, err := h.cat.CreateToken(context.Background(), t, hash); err != nil {
		h.t.Fatal(err)
	}
	return secret
}

type resp struct {
	*http.Response
	body []byte
}

func (r resp) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

func (r resp) problem(t *testing.T) gen.Problem {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, body %s", ct, r.body)
	}
	var p gen.Problem
	r.json(t, &p)
	return p
}

// do sends a request. body: nil, string (sent as is) or anything else
// (JSON-encoded). hdr are header name/value pairs; Content-Type defaults to
// application/json when there is a body.
func (h *harness) do(method, path, secret string, body any, hdr ...string) resp {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	data, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		h.t.Fatal(err)
	}
	h.checkSpec(req, res, data)
	return resp{res, data}
}

// checkSpec validates a response against the spec's declared responses.
func (h *harness) checkSpec(req *http.Request, res *http.Response, body []byte) {
	h.t.Helper()
	route, params, err := h.router.FindRoute(req)
	if err != nil {
		return // not an API route (404 tests)
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		opts.ExcludeResponseBody = true
	}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 res.StatusCode,
		Header:                 res.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                opts,
	})
	if err != nil {
		h.t.Errorf("%s %s -> %d does not match the spec: %v\nbody: %.500s", req.Method, req.URL.Path, res.StatusCode, err, body)
	}
}

// wantStatus fails with the body, which usually says why.
func wantStatus(t *testing.T, r resp, status int) {
	t.Helper()
	if r.StatusCode != status {
		t.Fatalf("status %d, want %d; body: %s", r.StatusCode, status, r.body)
	}
}

func wantProblem(t *testing.T, r resp, status int, slug string) gen.Problem {
	t.Helper()
	wantStatus(t, r, status)
	p := r.problem(t)
	if p.Type != problemBase+slug || p.Status != status || p.Title == "" || p.Instance == nil || *p.Instance == "" {
		t.Fatalf("problem %+v, want type %s", p, slug)
	}
	return p
}

func errorPaths(p gen.Problem) []string {
	var out []string
	if p.Errors != nil {
		for _, e := range *p.Errors {
			out = append(out, e.Path)
		}
	}
	return out
}
