package api

import (
	"net/http"
	"strings"
	"testing"
)

func TestWebUIServedWithoutTokenUnderStrictCSP(t *testing.T) {
	h := newHarness(t)
	r := h.do("GET", "/ui/", "", nil)
	wantStatus(t, r, http.StatusOK)
	if ct := r.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Fatalf("content type %q", ct)
	}
	if !strings.Contains(string(r.body), `src="app.js"`) {
		t.Fatalf("not the UI's index.html: %.300s", r.body)
	}
	csp := r.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "img-src 'self' blob:;", "frame-ancestors 'none'", "form-action 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-") {
		t.Errorf("CSP allows unsafe sources: %q", csp)
	}
	for k, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"} {
		if got := r.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}

	js := h.do("GET", "/ui/app.js", "", nil)
	wantStatus(t, js, http.StatusOK)
	if ct := js.Header.Get("Content-Type"); ct != "text/javascript; charset=utf-8" {
		t.Fatalf("app.js content type %q", ct)
	}
	etag := js.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	wantStatus(t, h.do("GET", "/ui/app.js", "", nil, "If-None-Match", etag), http.StatusNotModified)
	css := h.do("GET", "/ui/app.css", "", nil)
	wantStatus(t, css, http.StatusOK)
	if ct := css.Header.Get("Content-Type"); ct != "text/css; charset=utf-8" {
		t.Fatalf("app.css content type %q", ct)
	}
	wantStatus(t, h.do("HEAD", "/ui/", "", nil), http.StatusOK)

	wantProblem(t, h.do("GET", "/ui/missing.js", "", nil), http.StatusNotFound, "not-found")
	wantProblem(t, h.do("GET", "/ui/../openapi.json", "", nil), http.StatusNotFound, "not-found")

	// The routes are labelled in the metrics, not counted as unmatched.
	m := h.do("GET", "/metrics", "", nil)
	if !strings.Contains(string(m.body), `atelier_http_requests_total{method="GET",route="/ui/*",status="200"}`) {
		t.Error("UI requests are not labelled /ui/* in the metrics")
	}
}

func TestRootRedirectsToUI(t *testing.T) {
	h := newHarness(t)
	c := *h.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, p := range []string{"/", "/ui"} {
		res, err := c.Get(h.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusFound || res.Header.Get("Location") != "/ui/" {
			t.Errorf("GET %s: %d to %q, want 302 to /ui/", p, res.StatusCode, res.Header.Get("Location"))
		}
	}
}
