package store

import (
	"context"
	"time"

	"github.com/atelier-ml/atelier/internal/store/db"
)

// Deleted counts what one retention batch removed.
type Deleted struct {
	Runs      int64 // run rows
	LogChunks int64 // step_logs rows of those runs
	Items     int64 // step_items rows (wide forEach items) of those runs
	Artifacts int64 // artifacts rows (lineage; the bytes stay) of those runs
}

// DeleteFinishedRuns deletes up to limit finished runs (SUCCEEDED, FAILED,
// CANCELLED, TERMINATED) whose row was last written before before, oldest
// first, together with their step logs and wide forEach items, in one short transaction. It takes
// row locks on those runs only (SKIP LOCKED: batches of concurrent callers
// are disjoint) and no table lock beyond the ordinary ROW EXCLUSIVE of a
// DELETE, so listing, starts and mirror writes go on meanwhile. A caller
// deletes a backlog by calling it until it returns fewer than limit runs.
func (s *Store) DeleteFinishedRuns(ctx context.Context, before time.Time, limit int) (Deleted, error) {
	if limit <= 0 {
		return Deleted{}, invalid("retention batch size must be positive")
	}
	var d Deleted
	err := s.withTx(ctx, func(q *db.Queries) error {
		ids, err := q.LockFinishedRunsBefore(ctx, db.LockFinishedRunsBeforeParams{Before: before, MaxRows: int32(limit)})
		if err != nil || len(ids) == 0 {
			return err
		}
		if d.LogChunks, err = q.DeleteRunLogs(ctx, ids); err != nil {
			return err
		}
		if d.Items, err = q.DeleteRunItems(ctx, ids); err != nil {
			return err
		}
		if _, err = q.DeleteRunArtifactUses(ctx, ids); err != nil {
			return err
		}
		if d.Artifacts, err = q.DeleteRunArtifacts(ctx, ids); err != nil {
			return err
		}
		d.Runs, err = q.DeleteRuns(ctx, ids)
		return err
	})
	if err != nil {
		return Deleted{}, mapErr(err, "delete finished runs before %s", before.Format(time.RFC3339))
	}
	return d, nil
}
