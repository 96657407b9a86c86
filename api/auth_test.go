package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

func TestAuthFailures(t *testing.T) {
	h := newHarness(t)
	past := t0.Add(-time.Hour)
	expired := h.token(catalog.Token{ID: "00000000-0000-7000-8000-0000000000ee", Name: "old", Project: "alpha", Role: tokens.RoleViewer, ExpiresAt: &past})
	unknown := "atl_" + strings.Repeat("A", 43)

	cases := []struct {
		name, auth, detail, challenge string
	}{
		{"missing", "", "missing Authorization header", `Bearer realm="atelier"`},
		{"basic scheme", "Basic dXNlcjpwYXNz", "Bearer scheme", `error="invalid_request"`},
		{"malformed", "Bearer hello", "malformed", `error="invalid_token"`},
		{"unknown", "Bearer " + unknown, "unknown or revoked", `error="invalid_token"`},
		{"expired", "Bearer " + expired, "expired at", `error_description="the token expired at`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var hdr []string
			if c.auth != "" {
				hdr = []string{"Authorization", c.auth}
			}
			r := h.do("GET", "/v1/projects/alpha/runs", "", nil, hdr...)
			p := wantProblem(t, r, http.StatusUnauthorized, "unauthenticated")
			if !strings.Contains(*p.Detail, c.detail) {
				t.Errorf("detail %q lacks %q", *p.Detail, c.detail)
			}
			if ch := r.Header.Get("WWW-Authenticate"); !strings.Contains(ch, c.challenge) {
				t.Errorf("WWW-Authenticate %q lacks %q", ch, c.challenge)
			}
		})
	}
}

func TestAuthBeforeValidation(t *testing.T) {
	h := newHarness(t)
	// An anonymous malformed request learns nothing but "authenticate".
	r := h.do("POST", "/v1/projects", "", "{not json")
	wantProblem(t, r, http.StatusUnauthorized, "unauthenticated")
}

func TestRoles(t *testing.T) {
	h := newHarness(t)
	h.cat.runs[runID1] = catalog.Run{ID: runID1, Project: "alpha", Workflow: "w", State: "RUNNING", CreatedAt: t0, UpdatedAt: t0}

	// Viewers read but cannot start or cancel.
	wantStatus(t, h.do("GET", "/v1/projects/alpha/runs", h.viewer, nil), http.StatusOK)
	p := wantProblem(t, h.do("POST", "/v1/projects/alpha/runs", h.viewer, map[string]any{"workflow": "w"}), http.StatusForbidden, "forbidden")
	if !strings.Contains(*p.Detail, "editor") {
		t.Errorf("detail %q does not name the needed role", *p.Detail)
	}
	wantProblem(t, h.do("POST", "/v1/projects/alpha/runs/"+runID1+"/cancel", h.viewer, nil), http.StatusForbidden, "forbidden")
	wantProblem(t, h.do("POST", "/v1/projects/alpha/pipelines/train/versions", h.viewer, specJSON), http.StatusForbidden, "forbidden")
	// Editors cannot administer.
	wantProblem(t, h.do("POST", "/v1/projects", h.editor, map[string]any{"name": "gamma"}), http.StatusForbidden, "forbidden")
	wantProblem(t, h.do("POST", "/v1/projects/alpha/tokens", h.editor, map[string]any{"name": "x", "role": "viewer"}), http.StatusForbidden, "forbidden")
	wantProblem(t, h.do("DELETE", "/v1/tokens/"+h.editorTok.ID, h.editor, nil), http.StatusForbidden, "forbidden")
}

func TestTenantIsolation(t *testing.T) {
	h := newHarness(t)
	wantStatus(t, h.do("POST", "/v1/projects/alpha/pipelines/train/versions", h.editor, specJSON), http.StatusCreated)
	h.cat.runs[runID1] = catalog.Run{ID: runID1, Project: "alpha", Workflow: "w", State: "RUNNING", CreatedAt: t0, UpdatedAt: t0}

	// beta's editor gets exactly the answer for a project that does not exist.
	for _, path := range []string{
		"/v1/projects/alpha",
		"/v1/projects/alpha/runs/" + runID1,
		"/v1/projects/alpha/pipelines/train",
		"/v1/projects/alpha/runs/" + runID1 + "/events",
		"/v1/projects/alpha/runs/" + runID1 + "/steps/fit/logs",
	} {
		foreign := h.do("GET", path, h.betaEditor, nil)
		wantProblem(t, foreign, http.StatusNotFound, "not-found")
		missing := h.do("GET", strings.Replace(path, "alpha", "gamma", 1), h.admin, nil)
		fp, mp := foreign.problem(t), missing.problem(t)
		if strings.Replace(*fp.Detail, "alpha", "gamma", 1) != *mp.Detail {
			t.Errorf("%s: foreign %q vs missing %q", path, *fp.Detail, *mp.Detail)
		}
	}
	// Writes too, even with a valid body: 404, not 403.
	wantProblem(t, h.do("POST", "/v1/projects/alpha/runs/"+runID1+"/cancel", h.betaEditor, nil), http.StatusNotFound, "not-found")
	wantProblem(t, h.do("POST", "/v1/projects/alpha/runs", h.betaEditor, map[string]any{"pipeline": "train"}), http.StatusNotFound, "not-found")
	// A run ID from alpha under beta's own project is not found either.
	wantProblem(t, h.do("GET", "/v1/projects/beta/runs/"+runID1, h.betaEditor, nil), http.StatusNotFound, "not-found")
	// The admin sees alpha.
	wantStatus(t, h.do("GET", "/v1/projects/alpha/runs/"+runID1, h.admin, nil), http.StatusOK)
}

// Every token reads itself: name, role, project; never its secret.
func TestWhoami(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct {
		secret, name, role, project string
	}{
		{h.admin, "root", "admin", ""},
		{h.editor, "ci", "editor", "alpha"},
		{h.viewer, "dash", "viewer", "alpha"},
	} {
		r := h.do("GET", "/v1/whoami", c.secret, nil)
		wantStatus(t, r, http.StatusOK)
		var got gen.Token
		r.json(t, &got)
		if got.Name != c.name || string(got.Role) != c.role || deref(got.Project) != c.project || strings.Contains(string(r.body), c.secret) {
			t.Fatalf("%s: %s", c.name, r.body)
		}
	}
	wantProblem(t, h.do("GET", "/v1/whoami", "", nil), http.StatusUnauthorized, "unauthenticated")
}
