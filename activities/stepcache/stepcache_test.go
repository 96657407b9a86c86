package stepcache

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

type fakeStore struct {
	put    []catalog.CacheEntry
	entry  *catalog.CacheEntry
	maxAge time.Duration
	fail   error
}

func (f *fakeStore) LookupStepCache(_ context.Context, project, key string, _ time.Time, maxAge time.Duration) (catalog.CacheEntry, error) {
	f.maxAge = maxAge
	if f.fail != nil {
		return catalog.CacheEntry{}, f.fail
	}
	if f.entry == nil || f.entry.Project != project || f.entry.Key != key {
		return catalog.CacheEntry{}, catalog.ErrNotFound
	}
	return *f.entry, nil
}

func (f *fakeStore) PutStepCache(_ context.Context, e catalog.CacheEntry) error {
	if f.fail != nil {
		return f.fail
	}
	f.put = append(f.put, e)
	return nil
}

var now = time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)

func env(store Store) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	e := s.NewTestActivityEnvironment()
	New(store, func() time.Time { return now }).Register(e)
	return e
}

func TestLookup(t *testing.T) {
	item := 1
	st := &fakeStore{entry: &catalog.CacheEntry{Project: "p", Key: "k", Step: "fit", Item: &item, RunID: "r1", Attempt: 2,
		Outputs: map[string]any{"acc": 0.9}, CreatedAt: now.Add(-time.Minute)}}
	e := env(st)
	v, err := e.ExecuteActivity(activities.CacheLookupName, activities.CacheLookupRequest{Project: "p", Key: "k", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var got activities.CacheLookupResult
	if err := v.Get(&got); err != nil {
		t.Fatal(err)
	}
	at := now.Add(-time.Minute)
	want := activities.CacheLookupResult{Hit: true, Source: runstate.CacheSource{Run: "r1", Step: "fit", Item: &item, Attempt: 2, At: &at}, Outputs: map[string]any{"acc": 0.9}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("hit (-want +got):\n%s", diff)
	}
	if st.maxAge != time.Hour {
		t.Errorf("the step's ttl did not reach the store: %v", st.maxAge)
	}
	// Another project: a miss, not an error.
	v, err = e.ExecuteActivity(activities.CacheLookupName, activities.CacheLookupRequest{Project: "q", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Get(&got); err != nil || got.Hit {
		t.Fatalf("other project: %+v, %v", got, err)
	}
}

func TestStore(t *testing.T) {
	st := &fakeStore{}
	e := env(st)
	item := 0
	req := activities.CacheStoreRequest{Project: "p", Key: "k", Pipeline: "train",
		Source: runstate.CacheSource{Run: "r1", Step: "fit", Item: &item, Attempt: 1}, Outputs: map[string]any{"a": 1.0}, TTL: time.Hour}
	if _, err := e.ExecuteActivity(activities.CacheStoreName, req); err != nil {
		t.Fatal(err)
	}
	exp := now.Add(time.Hour)
	want := []catalog.CacheEntry{{Project: "p", Key: "k", Pipeline: "train", Step: "fit", Item: &item, RunID: "r1", Attempt: 1,
		Outputs: map[string]any{"a": 1.0}, CreatedAt: now, ExpiresAt: &exp}}
	if diff := cmp.Diff(want, st.put); diff != "" {
		t.Fatalf("stored (-want +got):\n%s", diff)
	}
}

func TestErrors(t *testing.T) {
	e := env(&fakeStore{fail: errors.New("connection refused")})
	_, err := e.ExecuteActivity(activities.CacheLookupName, activities.CacheLookupRequest{Project: "p", Key: "k"})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.NonRetryable() {
		t.Fatalf("a store error must be retried: %v", err)
	}
	_, err = e.ExecuteActivity(activities.CacheStoreName, activities.CacheStoreRequest{Project: "p", Key: "k"})
	if !errors.As(err, &appErr) || !appErr.NonRetryable() || appErr.Type() != ErrTypeBadRequest {
		t.Fatalf("a store without source: %v, want non-retryable %s", err, ErrTypeBadRequest)
	}
}
