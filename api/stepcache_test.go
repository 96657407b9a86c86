package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/workflows"
)

func TestCacheEntriesRoutes(t *testing.T) {
	h := newHarness(t)
	key := func(c byte) string { return strings.Repeat(string(c), 64) }
	past := t0.Add(-time.Hour)
	h.cat.cache = []catalog.CacheEntry{
		{Project: "alpha", Key: key('a'), Pipeline: "train", Step: "prep", RunID: "r1", Attempt: 1, Outputs: map[string]any{"rows": 1.0}, CreatedAt: t0},
		{Project: "alpha", Key: key('b'), Pipeline: "train", Step: "fit", Item: ptr(2), RunID: "r1", Attempt: 2, CreatedAt: t0},
		{Project: "alpha", Key: key('c'), Pipeline: "eval", Step: "fit", RunID: "r2", Attempt: 1, CreatedAt: t0, ExpiresAt: &past},
		{Project: "beta", Key: key('d'), Pipeline: "train", Step: "prep", RunID: "r3", Attempt: 1, CreatedAt: t0},
	}
	const path = "/v1/projects/alpha/cache"
	list := func(query, secret string) gen.CacheEntryList {
		t.Helper()
		r := h.do("GET", path+query, secret, nil)
		wantStatus(t, r, http.StatusOK)
		var l gen.CacheEntryList
		r.json(t, &l)
		return l
	}
	got := list("", h.viewer)
	if len(got.Entries) != 2 || got.Entries[0].Key != key('a') || got.Entries[1].Item == nil || *got.Entries[1].Item != 2 {
		t.Fatalf("viewer lists %+v, want the two live entries of alpha", got.Entries)
	}
	if got.Entries[1].Outputs == nil {
		t.Error("outputs must be an object, never null")
	}
	if got := list("?step=fit", h.viewer); len(got.Entries) != 1 || got.Entries[0].Key != key('b') {
		t.Errorf("step filter: %+v", got.Entries)
	}
	wantProblem(t, h.do("GET", path+"?pageToken=x", h.viewer, nil), http.StatusBadRequest, "invalid-request")
	// Another project's token sees nothing of alpha's.
	wantStatus(t, h.do("GET", path, h.betaEditor, nil), http.StatusNotFound)
	wantStatus(t, h.do("DELETE", path, h.betaEditor, nil), http.StatusNotFound)
	wantStatus(t, h.do("DELETE", path+"/"+key('a'), h.betaEditor, nil), http.StatusNotFound)

	// Viewers read, editors evict.
	wantStatus(t, h.do("DELETE", path+"?pipeline=train", h.viewer, nil), http.StatusForbidden)
	wantStatus(t, h.do("DELETE", path+"/"+key('a'), h.viewer, nil), http.StatusForbidden)
	wantProblem(t, h.do("DELETE", path+"/not-a-key", h.editor, nil), http.StatusBadRequest, "invalid-request")
	wantStatus(t, h.do("DELETE", path+"/"+key('a'), h.editor, nil), http.StatusNoContent)
	wantProblem(t, h.do("DELETE", path+"/"+key('a'), h.editor, nil), http.StatusNotFound, "not-found")
	wantProblem(t, h.do("DELETE", path+"/"+key('d'), h.editor, nil), http.StatusNotFound, "not-found") // beta's key
	r := h.do("DELETE", path+"?pipeline=train&step=fit", h.editor, nil)
	wantStatus(t, r, http.StatusOK)
	var ev gen.CacheEviction
	r.json(t, &ev)
	if ev.Evicted != 1 {
		t.Errorf("evicted %d, want 1", ev.Evicted)
	}
	if len(h.cat.cache) != 2 || h.cat.cache[1].Project != "beta" {
		t.Errorf("left %+v: alpha's expired entry and beta's", h.cat.cache)
	}
}

func TestStartRunWithCacheBypass(t *testing.T) {
	h := newHarness(t)
	withPipeline(t, h)
	h.cat.workflows["etl"] = catalog.GoWorkflow{Name: "etl", TaskQueue: "go-q", UpdatedAt: t0}
	wantStatus(t, h.do("POST", runsPath, h.editor, map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 3}, "cache": map[string]any{"bypass": true}}), http.StatusCreated)
	var in workflows.PipelineInput
	if err := json.Unmarshal(h.eng.started[0].Input.(json.RawMessage), &in); err != nil {
		t.Fatal(err)
	}
	if in.Cache == nil || !in.Cache.Bypass {
		t.Fatalf("input cache %+v, want bypass", in.Cache)
	}
	p := wantProblem(t, h.do("POST", runsPath, h.editor, map[string]any{"workflow": "etl", "cache": map[string]any{"bypass": true}}), http.StatusBadRequest, "invalid-request")
	if got := errorPaths(p); len(got) != 1 || got[0] != "cache" {
		t.Errorf("paths %v", got)
	}
	wantProblem(t, h.do("POST", runsPath, h.editor, map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 3}, "cache": map[string]any{"bypas": true}}), http.StatusBadRequest, "invalid-request")

	// The same Idempotency-Key with and without bypass are different requests.
	body := map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 3}}
	wantStatus(t, h.do("POST", runsPath, h.editor, body, "Idempotency-Key", "k1"), http.StatusCreated)
	body["cache"] = map[string]any{"bypass": true}
	wantStatus(t, h.do("POST", runsPath, h.editor, body, "Idempotency-Key", "k1"), http.StatusConflict)
}
