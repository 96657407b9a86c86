package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/db"
)

// LookupStepCache returns the project's live entry under key (expired at
// now, or older than maxAge when it is positive, counts as absent), or
// ErrNotFound. Entries of other projects are never returned.
func (s *Store) LookupStepCache(ctx context.Context, project, key string, now time.Time, maxAge time.Duration) (catalog.CacheEntry, error) {
	notBefore := time.Time{}
	if maxAge > 0 {
		notBefore = now.Add(-maxAge)
	}
	row, err := s.q.LookupStepCache(ctx, db.LookupStepCacheParams{Project: project, Key: key, Now: now, NotBefore: notBefore})
	if err != nil {
		return catalog.CacheEntry{}, mapErr(err, "look up step cache entry %s of %q", key, project)
	}
	return toCacheEntry(row)
}

// PutStepCache stores an entry, replacing the project's entry under the
// same key.
func (s *Store) PutStepCache(ctx context.Context, e catalog.CacheEntry) error {
	outputs := e.Outputs
	if outputs == nil {
		outputs = map[string]any{}
	}
	data, err := json.Marshal(outputs)
	if err != nil {
		return invalid("step cache outputs: %v", err)
	}
	var arts json.RawMessage
	if len(e.Artifacts) > 0 {
		if arts, err = json.Marshal(e.Artifacts); err != nil {
			return invalid("step cache artifacts: %v", err)
		}
	}
	var metrics json.RawMessage
	if e.Metrics != nil {
		if metrics, err = json.Marshal(e.Metrics); err != nil {
			return invalid("step cache metrics: %v", err)
		}
	}
	item := int32(-1)
	if e.Item != nil {
		item = int32(*e.Item)
	}
	params := db.PutStepCacheParams{
		Project: e.Project, Key: e.Key, Pipeline: e.Pipeline, Step: e.Step, Item: item,
		RunID: e.RunID, Attempt: int32(e.Attempt), Outputs: data, Artifacts: arts, Metrics: metrics,
		CreatedAt: e.CreatedAt, ExpiresAt: e.ExpiresAt,
	}
	// Committed without waiting for the WAL flush: the store sits on the
	// path from a step's end to its successors' start, and a flush costs
	// milliseconds (measured: 5.5 ms per store here, 0.3 ms without). An
	// entry lost to a database crash is only a miss: the step runs again.
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
			return err
		}
		return s.q.WithTx(tx).PutStepCache(ctx, params)
	})
	return mapErr(err, "put step cache entry %s of %q", e.Key, e.Project)
}

// ListStepCache pages through a project's live entries, newest first
// (keyset on created_at, key). Limit defaults to 50, capped at 500; a
// PageToken not issued for the same filter is ErrBadPageToken.
func (s *Store) ListStepCache(ctx context.Context, f catalog.CacheFilter) (catalog.CachePage, error) {
	if f.Project == "" {
		return catalog.CachePage{}, invalid("empty project")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultRunPageSize
	}
	limit = min(limit, MaxRunPageSize)
	fh := cacheFilterHash(f)
	p := db.ListStepCacheParams{Project: f.Project, Now: f.Now, Pipeline: f.Pipeline, Step: f.Step, MaxRows: int32(limit + 1)}
	if f.PageToken != "" {
		c, err := decodeCursor(f.PageToken, fh)
		if err != nil {
			return catalog.CachePage{}, err
		}
		p.CurCreated, p.CurKey = &c.t, &c.id
	}
	rows, err := s.q.ListStepCache(ctx, p)
	if err != nil {
		return catalog.CachePage{}, mapErr(err, "list step cache of %q", f.Project)
	}
	var page catalog.CachePage
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		page.NextPageToken = encodeCursor(cursor{t: last.CreatedAt, id: last.Key, filter: fh})
	}
	page.Entries = make([]catalog.CacheEntry, 0, len(rows))
	for _, r := range rows {
		e, err := toCacheEntry(r)
		if err != nil {
			return catalog.CachePage{}, err
		}
		page.Entries = append(page.Entries, e)
	}
	return page, nil
}

// EvictStepCache deletes a project's entries of pipeline and step (empty:
// any) and returns how many went.
func (s *Store) EvictStepCache(ctx context.Context, project, pipeline, step string) (int64, error) {
	n, err := s.q.DeleteStepCache(ctx, db.DeleteStepCacheParams{Project: project, Pipeline: pipeline, Step: step})
	return n, mapErr(err, "evict step cache of %q", project)
}

// EvictStepCacheKey deletes a project's entry under key, or returns
// ErrNotFound.
func (s *Store) EvictStepCacheKey(ctx context.Context, project, key string) error {
	n, err := s.q.DeleteStepCacheKey(ctx, db.DeleteStepCacheKeyParams{Project: project, Key: key})
	if err != nil {
		return mapErr(err, "evict step cache entry %s of %q", key, project)
	}
	if n == 0 {
		return fmt.Errorf("evict step cache entry %s of %q: %w", key, project, catalog.ErrNotFound)
	}
	return nil
}

// DeleteExpiredStepCache deletes up to limit entries expired at now, in
// one statement, and returns how many.
func (s *Store) DeleteExpiredStepCache(ctx context.Context, now time.Time, limit int) (int64, error) {
	n, err := s.q.DeleteExpiredStepCache(ctx, db.DeleteExpiredStepCacheParams{Now: now, MaxRows: int32(limit)})
	return n, mapErr(err, "delete expired step cache entries")
}

func cacheFilterHash(f catalog.CacheFilter) string {
	return filterHash(catalog.RunFilter{Project: f.Project, Pipeline: f.Pipeline, CreatedBy: "cache-step:" + f.Step})
}

func toCacheEntry(r db.StepCache) (catalog.CacheEntry, error) {
	e := catalog.CacheEntry{
		Project: r.Project, Key: r.Key, Pipeline: r.Pipeline, Step: r.Step, RunID: r.RunID, Attempt: int(r.Attempt),
		CreatedAt: utc(r.CreatedAt), ExpiresAt: utcPtr(r.ExpiresAt),
	}
	if r.Item >= 0 {
		item := int(r.Item)
		e.Item = &item
	}
	if err := json.Unmarshal(r.Outputs, &e.Outputs); err != nil {
		return catalog.CacheEntry{}, fmt.Errorf("step cache entry %s of %q: stored outputs: %v", r.Key, r.Project, err)
	}
	if len(r.Artifacts) > 0 {
		if err := json.Unmarshal(r.Artifacts, &e.Artifacts); err != nil {
			return catalog.CacheEntry{}, fmt.Errorf("step cache entry %s of %q: stored artifacts: %v", r.Key, r.Project, err)
		}
	}
	if len(r.Metrics) > 0 {
		if err := json.Unmarshal(r.Metrics, &e.Metrics); err != nil {
			return catalog.CacheEntry{}, fmt.Errorf("step cache entry %s of %q: stored metrics: %v", r.Key, r.Project, err)
		}
	}
	return e, nil
}
