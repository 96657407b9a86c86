-- name: InsertRuns :batchone
-- CreateRun and CreateRunIfLatest in one statement, for the group commit
-- of concurrent run inserts (runbatch.go). With @latest set it inserts
-- nothing when that is no longer the pipeline's newest version; either
-- way nothing when (project, idempotency_key) already exists.
INSERT INTO runs (
    id, project, pipeline, version, workflow, state, seq, status,
    created_at, updated_at, created_by, idempotency_key, request_hash, input
)
SELECT @id, @project, sqlc.narg(pipeline)::text, sqlc.narg(version)::integer, @workflow, @state, 0, sqlc.narg(status),
       COALESCE(sqlc.narg(created_at)::timestamptz, now()), now(), @created_by,
       sqlc.narg(idempotency_key), @request_hash, sqlc.narg(input)
WHERE sqlc.narg(latest)::integer IS NULL OR EXISTS (
    SELECT 1 FROM pipelines p
    WHERE p.project = @project AND p.name = sqlc.narg(pipeline)::text AND p.latest_version = sqlc.narg(latest)::integer
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

-- name: MirrorRun :exec
-- Inserts the run when absent (started outside the gateway); otherwise
-- applies the status only when it is newer than the stored one (and of the
-- same project). An applied write also replaces the run's metric rows
-- (migrations/00019_run_metrics.sql) with the status's scalars
-- (@metric_steps, @metric_names, @metric_values: one entry per step and
-- metric) in the same statement; an ignored write changes none.
WITH mirrored AS (
    INSERT INTO runs (
        id, project, pipeline, version, workflow, state, seq, status, created_at, updated_at, schedule, created_by
    ) VALUES (
        @id, @project, sqlc.narg(pipeline), sqlc.narg(version), @workflow, @state, @seq, @status,
        COALESCE(sqlc.narg(created_at)::timestamptz, now()), now(), sqlc.narg(schedule), @created_by
    )
    ON CONFLICT (id) DO UPDATE
    SET state = excluded.state,
        seq = excluded.seq,
        status = excluded.status,
        updated_at = now(),
        schedule = COALESCE(runs.schedule, excluded.schedule),
        created_by = CASE WHEN runs.created_by = '' THEN excluded.created_by ELSE runs.created_by END
    WHERE runs.seq < excluded.seq AND runs.project = excluded.project
    RETURNING runs.id, runs.project, runs.pipeline, runs.created_at
), metrics_gone AS (
    DELETE FROM run_metrics d
    USING mirrored m
    WHERE d.run_id = m.id
      AND NOT EXISTS (SELECT 1 FROM generate_subscripts(@metric_steps::text[], 1) AS i
                      WHERE (@metric_steps::text[])[i] = d.step AND (@metric_names::text[])[i] = d.name)
)
INSERT INTO run_metrics (run_id, project, pipeline, created_at, step, name, value)
SELECT m.id, m.project, m.pipeline, m.created_at,
           (@metric_steps::text[])[i], (@metric_names::text[])[i], (@metric_values::float8[])[i]
FROM mirrored m
CROSS JOIN generate_subscripts(@metric_steps::text[], 1) AS i
WHERE m.pipeline IS NOT NULL
ON CONFLICT (run_id, step, name) DO UPDATE
SET value = excluded.value
WHERE run_metrics.value <> excluded.value;

-- The list queries, one per combination of the equality filters (project
-- is always given). Each matches an index of the same columns followed by
-- (created_at DESC, id DESC) (migrations 00001 and 00005), so that the
-- time window and the keyset cursor are index conditions on one range of
-- that index, read in order: no Sort, no rows read that the filter drops.
-- Separate queries rather than "(@x IS NULL OR col = @x)": pgx prepares
-- statements and Postgres switches them to a generic plan, which could not
-- pick the index by which filters happen to be set. The bounds are
-- COALESCEd rather than "IS NULL OR" for the same reason. The upper bound
-- is one row comparison, the smaller of the cursor and (createdBefore, ''):
-- given both "created_at < before" and "(created_at, id) < cursor",
-- Postgres may start the index scan at the looser one and walk every entry
-- in between (seen at 1,000,000 runs: 450 buffers for a page of a window
-- 200 days back). They read run_summaries: a page carries neither the
-- status nor the input document.

-- name: ListRuns :many
SELECT * FROM run_summaries
WHERE project = @project
  AND created_at >= COALESCE(sqlc.narg(created_after)::timestamptz, '-infinity')
  AND (created_at, id) < (
        LEAST(COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'),
              COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')),
        CASE WHEN COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity')
                < COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')
             THEN COALESCE(sqlc.narg(cursor_id)::text, '') ELSE '' END)
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: ListRunsByPipeline :many
SELECT * FROM run_summaries
WHERE project = @project
  AND pipeline = @pipeline::text
  AND created_at >= COALESCE(sqlc.narg(created_after)::timestamptz, '-infinity')
  AND (created_at, id) < (
        LEAST(COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'),
              COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')),
        CASE WHEN COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity')
                < COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')
             THEN COALESCE(sqlc.narg(cursor_id)::text, '') ELSE '' END)
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: ListRunsByState :many
SELECT * FROM run_summaries
WHERE project = @project
  AND state = @state::text
  AND created_at >= COALESCE(sqlc.narg(created_after)::timestamptz, '-infinity')
  AND (created_at, id) < (
        LEAST(COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'),
              COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')),
        CASE WHEN COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity')
                < COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')
             THEN COALESCE(sqlc.narg(cursor_id)::text, '') ELSE '' END)
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: ListRunsByPipelineState :many
SELECT * FROM run_summaries
WHERE project = @project
  AND pipeline = @pipeline::text
  AND state = @state::text
  AND created_at >= COALESCE(sqlc.narg(created_after)::timestamptz, '-infinity')
  AND (created_at, id) < (
        LEAST(COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'),
              COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')),
        CASE WHEN COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity')
                < COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')
             THEN COALESCE(sqlc.narg(cursor_id)::text, '') ELSE '' END)
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: ListRunsByCreator :many
SELECT * FROM run_summaries
WHERE project = @project
  AND created_by = @created_by::text
  AND created_at >= COALESCE(sqlc.narg(created_after)::timestamptz, '-infinity')
  AND (created_at, id) < (
        LEAST(COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'),
              COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')),
        CASE WHEN COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity')
                < COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')
             THEN COALESCE(sqlc.narg(cursor_id)::text, '') ELSE '' END)
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: ListRunsByCreatorState :many
SELECT * FROM run_summaries
WHERE project = @project
  AND created_by = @created_by::text
  AND state = @state::text
  AND created_at >= COALESCE(sqlc.narg(created_after)::timestamptz, '-infinity')
  AND (created_at, id) < (
        LEAST(COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'),
              COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')),
        CASE WHEN COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity')
                < COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')
             THEN COALESCE(sqlc.narg(cursor_id)::text, '') ELSE '' END)
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: ListRunsByCreatorPipeline :many
SELECT * FROM run_summaries
WHERE project = @project
  AND created_by = @created_by::text
  AND pipeline = @pipeline::text
  AND created_at >= COALESCE(sqlc.narg(created_after)::timestamptz, '-infinity')
  AND (created_at, id) < (
        LEAST(COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'),
              COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')),
        CASE WHEN COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity')
                < COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')
             THEN COALESCE(sqlc.narg(cursor_id)::text, '') ELSE '' END)
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: ListRunsByCreatorPipelineState :many
SELECT * FROM run_summaries
WHERE project = @project
  AND created_by = @created_by::text
  AND pipeline = @pipeline::text
  AND state = @state::text
  AND created_at >= COALESCE(sqlc.narg(created_after)::timestamptz, '-infinity')
  AND (created_at, id) < (
        LEAST(COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'),
              COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')),
        CASE WHEN COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity')
                < COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')
             THEN COALESCE(sqlc.narg(cursor_id)::text, '') ELSE '' END)
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: ListRunsBySchedule :many
-- A schedule's runs (migration 00009's partial indexes); pipeline
-- and createdBy, fixed by the schedule, filter within its range ('' = any).
SELECT * FROM run_summaries
WHERE project = @project
  AND schedule = @schedule::text
  AND (@pipeline::text = '' OR pipeline = @pipeline::text)
  AND (@created_by::text = '' OR created_by = @created_by::text)
  AND created_at >= COALESCE(sqlc.narg(created_after)::timestamptz, '-infinity')
  AND (created_at, id) < (
        LEAST(COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'),
              COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')),
        CASE WHEN COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity')
                < COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')
             THEN COALESCE(sqlc.narg(cursor_id)::text, '') ELSE '' END)
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: ListRunsByScheduleState :many
-- A schedule's runs (migration 00009's partial indexes) in one state; pipeline
-- and createdBy, fixed by the schedule, filter within its range ('' = any).
SELECT * FROM run_summaries
WHERE project = @project
  AND schedule = @schedule::text
  AND state = @state::text
  AND (@pipeline::text = '' OR pipeline = @pipeline::text)
  AND (@created_by::text = '' OR created_by = @created_by::text)
  AND created_at >= COALESCE(sqlc.narg(created_after)::timestamptz, '-infinity')
  AND (created_at, id) < (
        LEAST(COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'),
              COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')),
        CASE WHEN COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity')
                < COALESCE(sqlc.narg(created_before)::timestamptz, 'infinity')
             THEN COALESCE(sqlc.narg(cursor_id)::text, '') ELSE '' END)
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: ListUnfinishedRuns :many
-- Runs the catalogue still shows as in flight that have not changed since
-- @before, oldest first, after the cursor (@after_at, @after_id): what the
-- reconciler checks against Temporal, a page per sweep.
SELECT * FROM runs
WHERE state IN ('PENDING', 'RUNNING', 'CANCELLING')
  AND updated_at < @before
  AND (updated_at, id) > (@after_at::timestamptz, @after_id::text)
ORDER BY updated_at, id
LIMIT @max_rows;

-- name: EndedRuns :many
-- Which of these runs the catalogue knows to have ended: GPU admission
-- frees what a run terminated through Temporal still held.
SELECT id FROM runs
WHERE id = ANY(@ids::text[])
  AND state NOT IN ('PENDING', 'RUNNING', 'CANCELLING');

-- name: ListRunsByMetricAsc :many
-- A pipeline's runs whose step @step reported scalar metric @metric
-- (run_metrics, migrations/00019), lowest value first, ties newest first,
-- within [@min_value, @max_value], after the keyset cursor (@cursor_value,
-- @cursor_created_at, @cursor_id): one range of run_metrics_asc_idx read
-- in order, the cursor's value its lower bound (GREATEST skips a NULL).
-- Ascending and descending are two queries rather than a CASE in ORDER
-- BY, which no index could serve.
SELECT r.id, r.project, r.pipeline, r.version, r.workflow, r.state, r.created_at, r.updated_at, r.created_by, m.value AS metric_value
FROM run_metrics m
JOIN runs r ON r.id = m.run_id AND r.project = m.project
WHERE m.project = @project AND m.pipeline = @pipeline::text AND m.step = @step::text AND m.name = sqlc.arg(metric)::text
  AND (sqlc.narg(state)::text IS NULL OR r.state = sqlc.narg(state)::text)
  AND m.value >= COALESCE(GREATEST(sqlc.narg(min_value)::float8, sqlc.narg(cursor_value)::float8), '-infinity'::float8)
  AND m.value <= COALESCE(sqlc.narg(max_value)::float8, 'infinity'::float8)
  AND (sqlc.narg(cursor_value)::float8 IS NULL OR m.value > sqlc.narg(cursor_value)::float8
       OR (m.created_at, m.run_id) < (sqlc.narg(cursor_created_at)::timestamptz, sqlc.narg(cursor_id)::text))
ORDER BY m.value, m.created_at DESC, m.run_id DESC
LIMIT @max_rows;

-- name: ListRunsByMetricDesc :many
-- ListRunsByMetricAsc highest value first (run_metrics_desc_idx), the
-- cursor's value the upper bound.
SELECT r.id, r.project, r.pipeline, r.version, r.workflow, r.state, r.created_at, r.updated_at, r.created_by, m.value AS metric_value
FROM run_metrics m
JOIN runs r ON r.id = m.run_id AND r.project = m.project
WHERE m.project = @project AND m.pipeline = @pipeline::text AND m.step = @step::text AND m.name = sqlc.arg(metric)::text
  AND (sqlc.narg(state)::text IS NULL OR r.state = sqlc.narg(state)::text)
  AND m.value >= COALESCE(sqlc.narg(min_value)::float8, '-infinity'::float8)
  AND m.value <= COALESCE(LEAST(sqlc.narg(max_value)::float8, sqlc.narg(cursor_value)::float8), 'infinity'::float8)
  AND (sqlc.narg(cursor_value)::float8 IS NULL OR m.value < sqlc.narg(cursor_value)::float8
       OR (m.created_at, m.run_id) < (sqlc.narg(cursor_created_at)::timestamptz, sqlc.narg(cursor_id)::text))
ORDER BY m.value DESC, m.created_at DESC, m.run_id DESC
LIMIT @max_rows;
