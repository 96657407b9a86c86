package store_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/internal/catalog"
)

func TestStepCache(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	exp := t0.Add(time.Hour)
	two := 2
	entry := catalog.CacheEntry{
		Project: "a", Key: "k1", Pipeline: "train", Step: "fit", Item: &two, RunID: "r1", Attempt: 3,
		Outputs: map[string]any{"acc": 0.9, "model": "m"}, CreatedAt: t0, ExpiresAt: &exp,
	}
	if err := s.PutStepCache(ctx, entry); err != nil {
		t.Fatal(err)
	}
	got, err := s.LookupStepCache(ctx, "a", "k1", t0.Add(time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(entry, got); diff != "" {
		t.Fatalf("lookup (-want +got):\n%s", diff)
	}

	// Tenant isolation: the same key in another project is another entry.
	if _, err := s.LookupStepCache(ctx, "b", "k1", t0, 0); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("project b sees project a's entry: %v", err)
	}
	// Expired at its expiry; too old for a reader's shorter TTL.
	if _, err := s.LookupStepCache(ctx, "a", "k1", exp, 0); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("expired entry: err = %v, want ErrNotFound", err)
	}
	if _, err := s.LookupStepCache(ctx, "a", "k1", t0.Add(10*time.Minute), 5*time.Minute); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("entry older than the reader's ttl: err = %v, want ErrNotFound", err)
	}
	if _, err := s.LookupStepCache(ctx, "a", "k1", t0.Add(10*time.Minute), 15*time.Minute); err != nil {
		t.Fatalf("entry within the reader's ttl: %v", err)
	}

	// A newer result replaces the entry; no expiry means never.
	newer := catalog.CacheEntry{Project: "a", Key: "k1", Pipeline: "train", Step: "fit", RunID: "r2", Attempt: 1,
		Outputs: map[string]any{}, CreatedAt: t0.Add(2 * time.Hour)}
	if err := s.PutStepCache(ctx, newer); err != nil {
		t.Fatal(err)
	}
	got, err = s.LookupStepCache(ctx, "a", "k1", t0.Add(1000*time.Hour), 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(newer, got); diff != "" {
		t.Fatalf("replaced (-want +got):\n%s", diff)
	}
}

func TestStepCacheListEvictSweep(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	soon := t0.Add(time.Minute)
	put := func(project, key, pipeline, step string, at time.Time, expires *time.Time) {
		t.Helper()
		if err := s.PutStepCache(ctx, catalog.CacheEntry{Project: project, Key: key, Pipeline: pipeline, Step: step,
			RunID: "r-" + key, Attempt: 1, CreatedAt: at, ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		put("a", fmt.Sprintf("p1-fit-%d", i), "p1", "fit", t0.Add(time.Duration(i)*time.Second), nil)
	}
	put("a", "p1-prep", "p1", "prep", t0, nil)
	put("a", "p2-fit", "p2", "fit", t0, nil)
	put("a", "old", "p2", "fit", t0, &soon)
	put("b", "p1-fit-b", "p1", "fit", t0, nil)

	keys := func(f catalog.CacheFilter) []string {
		t.Helper()
		var out []string
		for {
			page, err := s.ListStepCache(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range page.Entries {
				out = append(out, e.Key)
			}
			if page.NextPageToken == "" {
				return out
			}
			f.PageToken = page.NextPageToken
		}
	}
	now := t0.Add(time.Hour) // "old" has expired
	if diff := cmp.Diff([]string{"p1-fit-4", "p1-fit-3", "p1-fit-2", "p1-fit-1", "p1-fit-0"},
		keys(catalog.CacheFilter{Project: "a", Pipeline: "p1", Step: "fit", Now: now, Limit: 2})); diff != "" {
		t.Errorf("pages of p1/fit, newest first (-want +got):\n%s", diff)
	}
	if got := keys(catalog.CacheFilter{Project: "a", Step: "fit", Now: now}); len(got) != 6 {
		t.Errorf("fit in any pipeline: %v, want 6 live entries of project a", got)
	}
	if got := keys(catalog.CacheFilter{Project: "b", Now: now}); len(got) != 1 {
		t.Errorf("project b lists %v", got)
	}
	if _, err := s.ListStepCache(ctx, catalog.CacheFilter{Project: "b", Now: now, PageToken: "bogus"}); !errors.Is(err, catalog.ErrInvalidArgument) {
		t.Errorf("bad page token: %v", err)
	}

	// Eviction by filter stays in its project.
	n, err := s.EvictStepCache(ctx, "a", "p1", "fit")
	if err != nil || n != 5 {
		t.Fatalf("evict p1/fit: %d, %v; want 5", n, err)
	}
	if got := keys(catalog.CacheFilter{Project: "b", Now: now}); len(got) != 1 {
		t.Errorf("evicting in a touched b: %v", got)
	}
	if err := s.EvictStepCacheKey(ctx, "b", "p1-prep"); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("evicting a's key through b: %v, want ErrNotFound", err)
	}
	if err := s.EvictStepCacheKey(ctx, "a", "p1-prep"); err != nil {
		t.Fatal(err)
	}

	// The sweep deletes expired entries only.
	n, err = s.DeleteExpiredStepCache(ctx, now, 100)
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v; want 1", n, err)
	}
	if got := keys(catalog.CacheFilter{Project: "a", Now: t0}); len(got) != 1 || got[0] != "p2-fit" {
		t.Errorf("left in a: %v, want [p2-fit]", got)
	}
}
