-- name: UpsertStepItems :exec
-- One batch of finished items of a wide forEach step (arrays of equal
-- length, one element per item). A retried write, or an item written again
-- after a continue-as-new, replaces the row.
INSERT INTO step_items (run_id, step, idx, state, item, attempts, error, message, outputs, started_at, finished_at, artifacts)
SELECT @run_id::text, @step::text, unnest(@idxs::integer[]), unnest(@states::text[]), unnest(@items::text[])::jsonb,
       unnest(@attempts::text[])::jsonb, unnest(@errors::text[]), unnest(@messages::text[]),
       unnest(@outputs::text[])::jsonb, unnest(@started_ats::timestamptz[]), unnest(@finished_ats::timestamptz[]),
       unnest(@artifacts::text[])::jsonb
ON CONFLICT (run_id, step, idx) DO UPDATE
SET state = excluded.state, item = excluded.item, attempts = excluded.attempts, error = excluded.error,
    message = excluded.message, outputs = excluded.outputs, started_at = excluded.started_at,
    finished_at = excluded.finished_at, artifacts = excluded.artifacts;

-- name: ListStepItems :many
-- A keyset page of a step's items after index @after, in index order.
SELECT idx, state, item, attempts, error, message, outputs, started_at, finished_at
FROM step_items
WHERE run_id = @run_id AND step = @step AND idx > @after
ORDER BY idx
LIMIT @max_rows;

-- name: ListStepItemsByState :many
-- The same page, of the items in one state (step_items_state_idx).
SELECT idx, state, item, attempts, error, message, outputs, started_at, finished_at
FROM step_items
WHERE run_id = @run_id AND step = @step AND state = @state AND idx > @after
ORDER BY idx
LIMIT @max_rows;

-- name: CountStepItems :many
SELECT state, count(*)::bigint AS n
FROM step_items
WHERE run_id = @run_id AND step = @step
GROUP BY state
ORDER BY state;

-- name: ListStepOutputs :many
-- The outputs of a step's succeeded (or reused) items after index @after,
-- in index order: what a reducer reads, page by page.
SELECT idx, outputs
FROM step_items
WHERE run_id = @run_id AND step = @step AND idx > @after AND state IN ('SUCCEEDED', 'CACHED')
ORDER BY idx
LIMIT @max_rows;

-- name: ReuseStepItems :many
-- A retry's batch takes the items of @old_run that succeeded (or were
-- themselves reused) at the same index with the same item value, as CACHED
-- rows of @new_run, with their outputs and artifacts (references to the
-- bytes @old_run's items stored). Rows it already took (a retried activity) are taken
-- again, so every reused index is returned each time.
INSERT INTO step_items (run_id, step, idx, state, item, attempts, error, message, outputs, started_at, finished_at, artifacts)
SELECT @new_run, o.step, o.idx, 'CACHED', o.item, '[]'::jsonb, '', @message, o.outputs, now(), now(), o.artifacts
FROM step_items o
JOIN (SELECT unnest(@idxs::integer[]) AS idx, unnest(@items::text[])::jsonb AS item) AS n
  ON n.idx = o.idx AND n.item = o.item
WHERE o.run_id = @old_run AND o.step = @step AND o.state IN ('SUCCEEDED', 'CACHED')
ON CONFLICT (run_id, step, idx) DO UPDATE
SET state = excluded.state, outputs = excluded.outputs, message = excluded.message, artifacts = excluded.artifacts
RETURNING idx;

-- name: ListStepItemArtifacts :many
-- The artifacts of a step's succeeded (or reused) items after index
-- @after and below @below, in index order, of the items that wrote any:
-- what a fan-in reads, page by page.
SELECT idx, artifacts
FROM step_items
WHERE run_id = @run_id AND step = @step AND idx > @after AND idx < @below
  AND state IN ('SUCCEEDED', 'CACHED') AND artifacts <> '[]'::jsonb
ORDER BY idx
LIMIT @max_rows;
