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

// TestPipelineVersionsAreCachedButLatestIsChecked: starting runs reads a
// version's spec once and the newest version number once; a version posted
// meanwhile (here: straight into the catalogue, as through another
// gateway) is the "latest" of the very next start.
func TestPipelineVersionsAreCachedButLatestIsChecked(t *testing.T) {
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
	if h.cat.versionReads != 1 || h.cat.pipelineReads != 1 {
		t.Fatalf("%d reads of the version and %d of the pipeline for 4 starts, want 1 and 1", h.cat.versionReads, h.cat.pipelineReads)
	}
	v2 := strings.Replace(specJSON, `"default": 0.1`, `"default": 0.2`, 1)
	if _, _, err := h.cat.CreatePipelineVersion(context.Background(), "alpha", "train", []byte(v2), "d2", "elsewhere"); err != nil {
		t.Fatal(err)
	}
	if run := start(map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 1}}); deref(run.Version) != 2 {
		t.Fatalf("after version 2 was posted, latest started version %d", deref(run.Version))
	}
	if run := start(map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 1}}); deref(run.Version) != 2 {
		t.Fatalf("then version %d", deref(run.Version))
	}
	if h.cat.pipelineReads != 2 {
		t.Fatalf("%d reads of the pipeline, want 2 (the first start, the one that found version 2)", h.cat.pipelineReads)
	}
}
