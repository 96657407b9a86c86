package retention_test

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/services/retention"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/internal/store/storetest"
)

// TestCacheSweepDeletesOnlyExpiredEntries: entries past their expiry go,
// entries without one or not yet expired stay.
func TestCacheSweepDeletesOnlyExpiredEntries(t *testing.T) {
	ctx := t.Context()
	s, err := store.Open(ctx, storetest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	past, future := now.Add(-time.Minute), now.Add(time.Minute)
	for i, exp := range []*time.Time{&past, &past, &past, &future, nil} {
		if err := s.PutStepCache(ctx, catalog.CacheEntry{Project: "p", Key: fmt.Sprint("k", i), Step: "s", RunID: "r", Attempt: 1,
			CreatedAt: now.Add(-time.Hour), ExpiresAt: exp}); err != nil {
			t.Fatal(err)
		}
	}
	sw := retention.NewCacheSweeper(s, func() time.Time { return now }, zap.NewNop(), time.Hour)
	n, err := sw.Sweep(ctx)
	if err != nil || n != 3 {
		t.Fatalf("sweep: %d, %v; want 3 expired entries", n, err)
	}
	page, err := s.ListStepCache(ctx, catalog.CacheFilter{Project: "p", Now: now.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 2 {
		t.Fatalf("left %+v, want the unexpired and the ttl-less entry", page.Entries)
	}
}
