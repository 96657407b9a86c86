-- Retention (Store.DeleteFinishedRuns): one batch in one short transaction.

-- name: LockFinishedRunsBefore :many
-- The oldest finished runs last written before @before (the partial index
-- runs_finished_updated_idx). SKIP LOCKED: gateways sweeping at once take
-- disjoint batches instead of waiting for each other.
SELECT id FROM runs
WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'TERMINATED')
  AND updated_at < @before
ORDER BY updated_at
LIMIT @max_rows
FOR UPDATE SKIP LOCKED;

-- name: DeleteRunLogs :execrows
DELETE FROM step_logs
WHERE run_id = ANY(@ids::text[]);

-- name: DeleteRunItems :execrows
DELETE FROM step_items
WHERE run_id = ANY(@ids::text[]);

-- name: DeleteRunArtifactUses :execrows
DELETE FROM artifact_uses
WHERE run_id = ANY(@ids::text[]);

-- name: DeleteRunArtifacts :execrows
-- The rows only: the bytes stay in the object store (collecting them is
-- not done yet; see the README).
DELETE FROM artifacts
WHERE run_id = ANY(@ids::text[]);

-- name: DeleteRuns :execrows
DELETE FROM runs
WHERE id = ANY(@ids::text[]);
