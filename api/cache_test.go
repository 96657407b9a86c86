package api

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/api/gen"
)

// TestTokenCacheBoundsRevocation: with a 5 s token cache, a token revoked
// behind the gateway's back (another gateway, SQL) keeps working for at
// most 5 s; revoked through this gateway, at once.
func TestTokenCacheBoundsRevocation(t *testing.T) {
	var now atomic.Int64 // seconds after t0
	clock := func() time.Time { return t0.Add(time.Duration(now.Load()) * time.Second) }
	h := newHarness(t, WithTokenCacheTTL(5*time.Second), WithClock(clock))
	wantStatus(t, h.do("GET", runsPath, h.viewer, nil), http.StatusOK) // cached at t0
	if err := h.cat.RevokeToken(context.Background(), "00000000-0000-7000-8000-000000000003"); err != nil {
		t.Fatal(err)
	}
	now.Store(4)
	wantStatus(t, h.do("GET", runsPath, h.viewer, nil), http.StatusOK)
	now.Store(5)
	wantProblem(t, h.do("GET", runsPath, h.viewer, nil), http.StatusUnauthorized, "unauthenticated")

	// Through this gateway: at once, though the token was just cached.
	wantStatus(t, h.do("GET", runsPath, h.editor, nil), http.StatusOK)
	wantStatus(t, h.do("DELETE", "/v1/tokens/"+h.editorTok.ID, h.admin, nil), http.StatusNoContent)
	wantProblem(t, h.do("GET", runsPath, h.editor, nil), http.StatusUnauthorized, "unauthenticated")
}

// TestPipelineVersionsAreCachedButLatestIsNot: starting runs reads a
// version's spec once; a version posted meanwhile is the "latest" of the
// very next start.
func TestPipelineVersionsAreCachedButLatestIsNot(t *testing.T) {
	h := newHarness(t)
	withPipeline(t, h)
	start := func(body map[string]any) gen.Run {
		t.Helper()
		var run gen.Run
		r := h.do("POST", runsPath, h.editor, body)
		wantStatus(t, r, http.StatusCreated)
		r.json(t, &run)
		return run
	}
	for range 3 {
		if run := start(map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 1}}); deref(run.Version) != 1 {
			t.Fatalf("version %d, want 1", deref(run.Version))
		}
	}
	start(map[string]any{"pipeline": "train", "version": 1, "params": map[string]any{"epochs": 1}})
	if n := h.cat.versionReads; n != 1 {
		t.Fatalf("%d reads of the version for 4 starts, want 1", n)
	}
	v2 := strings.Replace(specJSON, `"default": 0.1`, `"default": 0.2`, 1)
	wantStatus(t, h.do("POST", "/v1/projects/alpha/pipelines/train/versions", h.editor, v2), http.StatusCreated)
	if run := start(map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 1}}); deref(run.Version) != 2 {
		t.Fatalf("after posting version 2, latest started version %d", deref(run.Version))
	}
}
