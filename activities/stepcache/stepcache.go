package stepcache

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// ErrTypeBadRequest marks a request that can never succeed (no project or
// key): retrying would only loop; it indicates a workflow bug.
const ErrTypeBadRequest = "BadCacheRequest"

// Store is the catalogue's step cache; the Postgres store implements it.
type Store interface {
	// LookupStepCache returns catalog.ErrNotFound on a miss.
	LookupStepCache(ctx context.Context, project, key string, now time.Time, maxAge time.Duration) (catalog.CacheEntry, error)
	PutStepCache(ctx context.Context, e catalog.CacheEntry) error
}

// Activities are the step cache activities.
type Activities struct {
	store Store
	now   func() time.Time
}

// New returns the activities over store; now is their clock (entry ages
// and expiries).
func New(store Store, now func() time.Time) *Activities {
	return &Activities{store: store, now: now}
}

// Register registers both activities under their contract names; workflows
// run them as local activities, so they must be registered on the worker
// that runs pipeline workflows.
func (a *Activities) Register(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(a.Lookup, activity.RegisterOptions{Name: activities.CacheLookupName})
	reg.RegisterActivityWithOptions(a.Store, activity.RegisterOptions{Name: activities.CacheStoreName})
}

// Lookup answers whether the project holds a live entry under the key.
// Store errors are returned as is, so Temporal retries them; the workflow
// runs the step when the lookup finally fails.
func (a *Activities) Lookup(ctx context.Context, req activities.CacheLookupRequest) (activities.CacheLookupResult, error) {
	if req.Project == "" || req.Key == "" {
		return activities.CacheLookupResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("cache lookup without project or key (project=%q)", req.Project), ErrTypeBadRequest, nil)
	}
	e, err := a.store.LookupStepCache(ctx, req.Project, req.Key, a.now(), req.TTL)
	if errors.Is(err, catalog.ErrNotFound) {
		return activities.CacheLookupResult{}, nil
	}
	if err != nil {
		return activities.CacheLookupResult{}, err
	}
	at := e.CreatedAt
	return activities.CacheLookupResult{
		Hit:     true,
		Source:  runstate.CacheSource{Run: e.RunID, Step: e.Step, Item: e.Item, Attempt: e.Attempt, At: &at},
		Outputs: e.Outputs, Artifacts: e.Artifacts, Metrics: e.Metrics,
	}, nil
}

// Store writes the entry of a successful execution, replacing an older
// one under the same key. A retried store writes the same entry again.
func (a *Activities) Store(ctx context.Context, req activities.CacheStoreRequest) error {
	if req.Project == "" || req.Key == "" || req.Source.Run == "" || req.Source.Step == "" {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("cache store without project, key or source (project=%q, run=%q, step=%q)", req.Project, req.Source.Run, req.Source.Step),
			ErrTypeBadRequest, nil)
	}
	now := a.now().UTC()
	e := catalog.CacheEntry{
		Project: req.Project, Key: req.Key, Pipeline: req.Pipeline, Step: req.Source.Step, Item: req.Source.Item,
		RunID: req.Source.Run, Attempt: req.Source.Attempt, Outputs: req.Outputs, Artifacts: req.Artifacts, Metrics: req.Metrics, CreatedAt: now,
	}
	if req.TTL > 0 {
		exp := now.Add(req.TTL)
		e.ExpiresAt = &exp
	}
	return a.store.PutStepCache(ctx, e)
}
