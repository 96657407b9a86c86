-- name: CreateRun :one
-- Returns no row when (project, idempotency_key) already exists.
INSERT INTO runs (
    id, project, pipeline, version, workflow, state, seq, status,
    created_at, updated_at, created_by, idempotency_key, request_hash, input
) VALUES (
    @id, @project, sqlc.narg(pipeline), sqlc.narg(version), @workflow, @state, 0, sqlc.narg(status),
    COALESCE(sqlc.narg(created_at)::timestamptz, now()), now(), @created_by,
    sqlc.narg(idempotency_key), @request_hash, sqlc.narg(input)
)
ON CONFLICT (project, idempotency_key) DO NOTHING
RETURNING *;

-- name: GetRun :one
SELECT * FROM runs
WHERE project = @project AND id = @id;

-- name: GetRunByIdempotencyKey :one
SELECT * FROM runs
WHERE project = @project AND idempotency_key = @idempotency_key;

-- name: DeleteRun :execrows
DELETE FROM runs
WHERE id = @id;

-- name: MirrorRun :execrows
-- Inserts the run when absent (started outside the gateway); otherwise
-- applies the status only when it is newer than the stored one (and of the
-- same project). Returns 0 rows affected for an ignored write.
INSERT INTO runs (
    id, project, pipeline, version, workflow, state, seq, status, created_at, updated_at
) VALUES (
    @id, @project, sqlc.narg(pipeline), sqlc.narg(version), @workflow, @state, @seq, @status,
    COALESCE(sqlc.narg(created_at)::timestamptz, now()), now()
)
ON CONFLICT (id) DO UPDATE
SET state = excluded.state,
    seq = excluded.seq,
    status = excluded.status,
    updated_at = now()
WHERE runs.seq < excluded.seq AND runs.project = excluded.project;

-- The three list queries share one shape; each one matches an index so that
-- the keyset condition is an index condition. The bounds are COALESCEd
-- rather than "IS NULL OR" so that a cached generic plan still uses them.

-- name: ListRuns :many
SELECT * FROM runs
WHERE project = @project
  AND created_at >= COALESCE(sqlc.narg(created_after)::timestamptz, '-infinity')
  AND created_at < COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')
  AND (created_at, id) < (COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'),
                          COALESCE(sqlc.narg(cursor_id)::text, ''))
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: ListRunsByPipeline :many
SELECT * FROM runs
WHERE project = @project
  AND pipeline = @pipeline::text
  AND (sqlc.narg(state)::text IS NULL OR state = sqlc.narg(state)::text)
  AND created_at >= COALESCE(sqlc.narg(created_after)::timestamptz, '-infinity')
  AND created_at < COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')
  AND (created_at, id) < (COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'),
                          COALESCE(sqlc.narg(cursor_id)::text, ''))
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: ListRunsByState :many
SELECT * FROM runs
WHERE project = @project
  AND state = @state
  AND created_at >= COALESCE(sqlc.narg(created_after)::timestamptz, '-infinity')
  AND created_at < COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')
  AND (created_at, id) < (COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'),
                          COALESCE(sqlc.narg(cursor_id)::text, ''))
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: ListUnfinishedRuns :many
-- Runs the catalogue still shows as in flight that have not changed since
-- @before, oldest first: what the reconciler checks against Temporal.
SELECT * FROM runs
WHERE state IN ('PENDING', 'RUNNING', 'CANCELLING')
  AND updated_at < @before
ORDER BY updated_at
LIMIT @max_rows;

-- name: EndedRuns :many
-- Which of these runs the catalogue knows to have ended: GPU admission
-- frees what a run terminated through Temporal still held.
SELECT id FROM runs
WHERE id = ANY(@ids::text[])
  AND state NOT IN ('PENDING', 'RUNNING', 'CANCELLING');
