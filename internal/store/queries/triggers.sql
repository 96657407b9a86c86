-- name: CreateTrigger :one
-- Inserts nothing (no row) when the project already has @max_per_project
-- triggers.
INSERT INTO triggers (id, project, name, kind, on_pipeline, on_states, pipeline, version, params, secret, max_per_minute, enabled, description, created_at, created_by)
SELECT @id, @project, @name, @kind, sqlc.narg(on_pipeline), sqlc.narg(on_states)::text[], @pipeline, sqlc.narg(version), @params, @secret, @max_per_minute, @enabled, @description, now(), @created_by
WHERE (SELECT count(*) FROM triggers WHERE project = @project) < @max_per_project::integer
RETURNING *;

-- name: GetTrigger :one
SELECT * FROM triggers
WHERE project = @project AND name = @name;

-- name: ListTriggers :many
SELECT * FROM triggers
WHERE project = @project
ORDER BY name;

-- name: SetTriggerEnabled :one
UPDATE triggers SET enabled = @enabled
WHERE project = @project AND name = @name
RETURNING *;

-- name: DeleteTrigger :execrows
DELETE FROM triggers
WHERE project = @project AND name = @name;

-- name: InsertTriggerFiring :execrows
-- Queues a firing of a hook trigger; a source (delivery ID) already
-- queued for the trigger is not queued again (rows affected 0).
INSERT INTO trigger_firings (id, trigger_id, project, source, payload)
VALUES (@id, @trigger_id, @project, @source, @payload)
ON CONFLICT (trigger_id, source) DO NOTHING;

-- name: GetTriggerFiring :one
SELECT * FROM trigger_firings
WHERE trigger_id = @trigger_id AND source = @source;

-- name: ClaimTriggerFirings :many
-- Leases up to @max_rows due firings of enabled triggers to @owner until
-- @lease_until and counts the attempt. A trigger gets at most its
-- max_per_minute runs started in any minute: its firings beyond what the
-- minute since @minute_ago leaves wait (per claim; gateways claiming at once may
-- together exceed it by a claim's worth). SKIP LOCKED: gateways claiming
-- at once take different rows.
UPDATE trigger_firings f
SET lease_owner = @owner,
    lease_until = @lease_until,
    attempts = f.attempts + 1
FROM triggers t
WHERE t.id = f.trigger_id
  AND f.id IN (
    SELECT l.id FROM trigger_firings l
    WHERE l.id IN (
        SELECT c.id FROM (
            SELECT q.id, q.next_attempt_at,
                   row_number() OVER (PARTITION BY q.trigger_id ORDER BY q.next_attempt_at, q.id) AS n,
                   qt.max_per_minute - (
                       SELECT count(*) FROM trigger_firings s
                       WHERE s.trigger_id = q.trigger_id AND s.state = 'started'
                         AND s.finished_at > @minute_ago::timestamptz
                   ) AS room
            FROM trigger_firings q
            JOIN triggers qt ON qt.id = q.trigger_id AND qt.enabled
            WHERE q.state = 'pending'
              AND q.next_attempt_at <= @now
              AND (q.lease_until IS NULL OR q.lease_until < @now)
        ) c
        WHERE c.n <= c.room
        ORDER BY c.next_attempt_at
        LIMIT @max_rows
    )
    FOR UPDATE OF l SKIP LOCKED
  )
RETURNING f.id, f.trigger_id, f.project, f.source, f.payload, f.attempts,
          t.name, t.pipeline, t.version, t.params, t.kind;

-- name: RecordTriggerFiring :execrows
-- Ends attempt @attempt of a firing (@state; pending: retried at
-- @next_attempt_at), if @owner still holds its lease for that attempt.
UPDATE trigger_firings
SET state = @state,
    next_attempt_at = @next_attempt_at,
    lease_owner = NULL,
    lease_until = NULL,
    run_id = COALESCE(sqlc.narg(run_id), run_id),
    params = COALESCE(sqlc.narg(params), params),
    error = @error,
    finished_at = CASE WHEN @state::text = 'pending' THEN NULL ELSE now() END
WHERE id = @id AND lease_owner = @owner AND attempts = @attempt;

-- name: ListTriggerFirings :many
-- A trigger's firings, newest first, after the keyset cursor.
SELECT * FROM trigger_firings
WHERE trigger_id = @trigger_id
  AND (created_at, id) < (COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'), COALESCE(sqlc.narg(cursor_id)::text, ''))
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;

-- name: DeleteFinishedTriggerFirings :execrows
-- Prunes the firing log: firings that ended before @before.
DELETE FROM trigger_firings
WHERE id IN (
    SELECT f.id FROM trigger_firings f
    WHERE f.state <> 'pending' AND f.finished_at < @before::timestamptz
    LIMIT @max_rows
);

-- name: ListTriggerSecrets :many
-- Every hook trigger's stored secret (sealed or, from before sealing,
-- clear), to seal or rewrap them (key rotation).
SELECT id, secret FROM triggers WHERE secret <> '' ORDER BY id;

-- name: ReplaceTriggerSecret :execrows
-- Stores a hook trigger's secret sealed anew, unless it changed meanwhile.
UPDATE triggers SET secret = @sealed WHERE id = @id AND secret = @old;
