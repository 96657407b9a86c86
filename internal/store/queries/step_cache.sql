-- name: LookupStepCache :one
-- The project's live entry under @key, unless older than @not_before.
SELECT * FROM step_cache
WHERE project = @project AND key = @key
  AND (expires_at IS NULL OR expires_at > sqlc.arg(now)::timestamptz)
  AND created_at >= @not_before;

-- name: PutStepCache :exec
-- A newer result replaces the entry under the same key.
INSERT INTO step_cache (project, key, pipeline, step, item, run_id, attempt, outputs, artifacts, metrics, created_at, expires_at)
VALUES (@project, @key, @pipeline, @step, @item, @run_id, @attempt, @outputs, @artifacts, @metrics, @created_at, @expires_at)
ON CONFLICT (project, key) DO UPDATE
SET pipeline = excluded.pipeline,
    step = excluded.step,
    item = excluded.item,
    run_id = excluded.run_id,
    attempt = excluded.attempt,
    outputs = excluded.outputs,
    artifacts = excluded.artifacts,
    metrics = excluded.metrics,
    created_at = excluded.created_at,
    expires_at = excluded.expires_at;

-- name: ListStepCache :many
-- A page of the project's live entries, newest first, after the cursor
-- (created_at, key) when given; empty @pipeline / @step match any.
SELECT * FROM step_cache
WHERE project = @project
  AND (expires_at IS NULL OR expires_at > sqlc.arg(now)::timestamptz)
  AND (@pipeline::text = '' OR pipeline = @pipeline)
  AND (@step::text = '' OR step = @step)
  AND (sqlc.narg(cur_created)::timestamptz IS NULL
       OR (created_at, key) < (sqlc.narg(cur_created)::timestamptz, sqlc.narg(cur_key)::text))
ORDER BY created_at DESC, key DESC
LIMIT @max_rows;

-- name: DeleteStepCache :execrows
-- Evicts the project's entries of @pipeline / @step (empty: any).
DELETE FROM step_cache
WHERE project = @project
  AND (@pipeline::text = '' OR pipeline = @pipeline)
  AND (@step::text = '' OR step = @step);

-- name: DeleteStepCacheKey :execrows
DELETE FROM step_cache
WHERE project = @project AND key = @key;

-- name: DeleteExpiredStepCache :execrows
-- One batch of entries expired at @now (the partial index on expires_at).
DELETE FROM step_cache
WHERE (project, key) IN (
    SELECT c.project, c.key FROM step_cache AS c
    WHERE c.expires_at IS NOT NULL AND c.expires_at <= sqlc.arg(now)::timestamptz
    LIMIT sqlc.arg(max_rows)::int);
