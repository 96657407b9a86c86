package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/api/gen"
)

func TestCreateProject(t *testing.T) {
	h := newHarness(t)
	r := h.do("POST", "/v1/projects", h.admin, map[string]any{"name": "gamma", "description": "third"})
	wantStatus(t, r, http.StatusCreated)
	if r.Header.Get("Location") != "/v1/projects/gamma" {
		t.Errorf("Location %q", r.Header.Get("Location"))
	}
	var p gen.Project
	r.json(t, &p)
	if p.Name != "gamma" || deref(p.Description) != "third" || p.CreatedAt.IsZero() {
		t.Fatalf("%+v", p)
	}
	wantProblem(t, h.do("POST", "/v1/projects", h.admin, map[string]any{"name": "gamma"}), http.StatusConflict, "already-exists")
}

func TestCreateProjectBadRequests(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		name, body, slug string
		status           int
		paths            []string
	}{
		{"malformed JSON", `{"name": "x",`, "malformed-request", 400, nil},
		{"unknown field", `{"name": "delta", "owner": "me"}`, "invalid-request", 400, []string{"owner"}},
		{"bad name and long description", `{"name": "Delta!", "description": "` + strings.Repeat("x", 1001) + `"}`, "invalid-request", 400, []string{"description", "name"}},
		{"missing name", `{}`, "invalid-request", 400, []string{"name"}},
		{"wrong type", `{"name": 5}`, "invalid-request", 400, []string{"name"}},
		{"not an object", `[1]`, "invalid-request", 400, []string{"body"}},
		{"empty body", ``, "invalid-request", 400, []string{"body"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("POST", "/v1/projects", h.admin, c.body)
			p := wantProblem(t, r, c.status, c.slug)
			got := errorPaths(p)
			if strings.Join(sorted(got), ",") != strings.Join(c.paths, ",") {
				t.Errorf("error paths %v, want %v (%s)", got, c.paths, r.body)
			}
			if *p.Detail == "" {
				t.Error("no detail")
			}
		})
	}
	t.Run("wrong content type", func(t *testing.T) {
		r := h.do("POST", "/v1/projects", h.admin, `name: delta`, "Content-Type", "application/yaml")
		wantProblem(t, r, http.StatusUnsupportedMediaType, "unsupported-media-type")
	})
	t.Run("oversized body", func(t *testing.T) {
		big := `{"name": "delta", "description": "` + strings.Repeat("x", 1<<20) + `"}`
		p := wantProblem(t, h.do("POST", "/v1/projects", h.admin, big), http.StatusRequestEntityTooLarge, "payload-too-large")
		if !strings.Contains(*p.Detail, "1048576") {
			t.Errorf("detail %q", *p.Detail)
		}
	})
}

func TestListAndGetProjects(t *testing.T) {
	h := newHarness(t)
	var all gen.ProjectList
	r := h.do("GET", "/v1/projects", h.admin, nil)
	wantStatus(t, r, http.StatusOK)
	r.json(t, &all)
	if len(all.Projects) != 2 {
		t.Fatalf("admin sees %d projects", len(all.Projects))
	}
	var own gen.ProjectList
	h.do("GET", "/v1/projects", h.viewer, nil).json(t, &own)
	if len(own.Projects) != 1 || own.Projects[0].Name != "alpha" {
		t.Fatalf("viewer sees %+v", own.Projects)
	}
	wantStatus(t, h.do("GET", "/v1/projects/alpha", h.viewer, nil), http.StatusOK)
	wantProblem(t, h.do("GET", "/v1/projects/nope", h.admin, nil), http.StatusNotFound, "not-found")
}

func TestTokens(t *testing.T) {
	h := newHarness(t)
	r := h.do("POST", "/v1/projects/alpha/tokens", h.admin, map[string]any{"name": "bot", "role": "editor", "expiresInHours": 24})
	wantStatus(t, r, http.StatusCreated)
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Error("secret response may be cached")
	}
	var ct gen.CreatedToken
	r.json(t, &ct)
	if !strings.HasPrefix(ct.Secret, "atl_") || deref(ct.Token.Project) != "alpha" || ct.Token.Role != "editor" || ct.Token.ExpiresAt == nil {
		t.Fatalf("%+v", ct)
	}
	if strings.Contains(string(h.do("GET", "/v1/projects/alpha", ct.Secret, nil).body), ct.Secret) {
		t.Fatal("secret echoed")
	}
	wantStatus(t, h.do("GET", "/v1/projects/alpha/runs", ct.Secret, nil), http.StatusOK)

	wantProblem(t, h.do("POST", "/v1/projects/alpha/tokens", h.admin, map[string]any{"name": "bot", "role": "viewer"}), http.StatusConflict, "already-exists")
	p := wantProblem(t, h.do("POST", "/v1/projects/alpha/tokens", h.admin, map[string]any{"name": "x", "role": "admin"}), http.StatusBadRequest, "invalid-request")
	if got := errorPaths(p); len(got) != 1 || got[0] != "role" {
		t.Errorf("paths %v", got)
	}
	wantProblem(t, h.do("POST", "/v1/projects/nope/tokens", h.admin, map[string]any{"name": "x", "role": "viewer"}), http.StatusNotFound, "not-found")

	// Revocation takes effect at once.
	wantStatus(t, h.do("DELETE", "/v1/tokens/"+ct.Token.Id, h.admin, nil), http.StatusNoContent)
	wantProblem(t, h.do("GET", "/v1/projects/alpha/runs", ct.Secret, nil), http.StatusUnauthorized, "unauthenticated")
	wantProblem(t, h.do("DELETE", "/v1/tokens/"+ct.Token.Id, h.admin, nil), http.StatusNotFound, "not-found")
	p = wantProblem(t, h.do("DELETE", "/v1/tokens/not.a.token", h.admin, nil), http.StatusBadRequest, "invalid-request")
	if got := errorPaths(p); len(got) != 1 || got[0] != "path.token" {
		t.Errorf("paths %v", got)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
