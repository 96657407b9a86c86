-- name: CreateWebhook :one
-- Inserts nothing (no row) when the project already has @max_per_project
-- webhooks: each event is delivered to every matching one, so their
-- number bounds the work one run's events make.
INSERT INTO webhooks (id, project, url, events, pipeline, secret, description, enabled, include_output, created_at, updated_at, created_by)
SELECT @id, @project, @url, @events::text[], sqlc.narg(pipeline), @secret, @description, @enabled, @include_output, now(), now(), @created_by
WHERE (SELECT count(*) FROM webhooks WHERE project = @project) < @max_per_project::integer
RETURNING *;

-- name: GetWebhook :one
SELECT * FROM webhooks
WHERE project = @project AND id = @id;

-- name: ListWebhooks :many
SELECT * FROM webhooks
WHERE project = @project
ORDER BY created_at, id;

-- name: UpdateWebhook :one
-- Changes the fields given (NULL: unchanged); @clear_pipeline removes the
-- pipeline filter.
UPDATE webhooks
SET url = COALESCE(sqlc.narg(url), url),
    events = COALESCE(sqlc.narg(events)::text[], events),
    pipeline = CASE WHEN @clear_pipeline::boolean THEN NULL ELSE COALESCE(sqlc.narg(pipeline), pipeline) END,
    secret = COALESCE(sqlc.narg(secret), secret),
    description = COALESCE(sqlc.narg(description), description),
    enabled = COALESCE(sqlc.narg(enabled), enabled),
    include_output = COALESCE(sqlc.narg(include_output), include_output),
    updated_at = now()
WHERE project = @project AND id = @id
RETURNING *;

-- name: DeleteWebhook :execrows
DELETE FROM webhooks
WHERE project = @project AND id = @id;

-- name: MirrorRunNotify :execrows
-- MirrorRun that also queues the events the status shows (@event_ids,
-- @event_types, @event_steps, @event_payloads and, for webhooks that opt
-- in to step output, @event_payloads_output: one entry per event) for every enabled
-- webhook of the project that subscribes to them, in one statement: the
-- outbox rows exist if and only if the status write was applied. A write
-- that is ignored (not newer) queues nothing, which loses nothing: the
-- newer status shows every event the older one did. An event already
-- queued for a webhook is not queued again. Rows affected: deliveries
-- queued. A final status (@finished) also queues one firing of every
-- enabled run trigger of the project on this pipeline and state
-- (migrations/00014_triggers.sql), with @trigger_payload, once per trigger
-- and run. Like MirrorRun, an applied write replaces the run's metric
-- rows (@metric_steps, @metric_names, @metric_values).
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
), metrics_set AS (
    INSERT INTO run_metrics (run_id, project, pipeline, created_at, step, name, value)
    SELECT m.id, m.project, m.pipeline, m.created_at,
           (@metric_steps::text[])[i], (@metric_names::text[])[i], (@metric_values::float8[])[i]
    FROM mirrored m
    CROSS JOIN generate_subscripts(@metric_steps::text[], 1) AS i
    WHERE m.pipeline IS NOT NULL
    ON CONFLICT (run_id, step, name) DO UPDATE
    SET value = excluded.value
    WHERE run_metrics.value <> excluded.value
), fired AS (
    INSERT INTO trigger_firings (id, trigger_id, project, source, payload)
    SELECT 'fir-' || substr(md5(t.id || '/' || @id), 1, 24), t.id, t.project, @id, @trigger_payload::jsonb
    FROM mirrored m
    JOIN triggers t ON t.project = m.project AND t.kind = 'run' AND t.enabled AND t.on_pipeline = @subject::text
    WHERE @finished::boolean AND @state = ANY (t.on_states)
    ON CONFLICT (trigger_id, source) DO NOTHING
)
INSERT INTO webhook_deliveries (id, webhook_id, project, run_id, event_id, event, step, payload)
SELECT 'dlv-' || substr(md5(w.id || '/' || (@event_ids::text[])[i]), 1, 24), w.id, w.project, @id,
       (@event_ids::text[])[i], (@event_types::text[])[i],
       NULLIF((@event_steps::text[])[i], ''),
       (CASE WHEN w.include_output THEN (@event_payloads_output::text[])[i] ELSE (@event_payloads::text[])[i] END)::json
FROM mirrored m
JOIN webhooks w ON w.project = m.project
CROSS JOIN generate_subscripts(@event_ids::text[], 1) AS i
WHERE w.enabled
  AND (@event_types::text[])[i] = ANY (w.events)
  AND (w.pipeline IS NULL OR w.pipeline = @subject::text)
ON CONFLICT (webhook_id, event_id) DO NOTHING;

-- name: ClaimWebhookDeliveries :many
-- Leases up to @max_rows due deliveries of enabled webhooks to @owner
-- until @lease_until and counts the attempt it is about to make. SKIP
-- LOCKED: gateways claiming at once take different rows; a lease that
-- expired (its gateway died mid-attempt) makes the delivery due again.
UPDATE webhook_deliveries d
SET lease_owner = @owner,
    lease_until = @lease_until,
    attempts = d.attempts + 1
FROM webhooks w
WHERE w.id = d.webhook_id
  AND d.id IN (
    SELECT q.id FROM webhook_deliveries q
    JOIN webhooks qw ON qw.id = q.webhook_id AND qw.enabled
    WHERE q.state = 'pending'
      AND q.next_attempt_at <= @now
      AND (q.lease_until IS NULL OR q.lease_until < @now)
    ORDER BY q.next_attempt_at
    LIMIT @max_rows
    FOR UPDATE OF q SKIP LOCKED
  )
RETURNING d.id, d.event, d.event_id, d.attempts, d.payload::text AS payload, w.url, w.secret, w.id AS webhook_id;

-- name: RecordWebhookAttempt :execrows
-- Logs attempt @attempt of a delivery and moves the delivery on (@state,
-- @next_attempt_at), if @owner still holds its lease for that attempt;
-- otherwise nothing is written (rows affected 0).
WITH updated AS (
    UPDATE webhook_deliveries
    SET state = @state,
        next_attempt_at = @next_attempt_at,
        lease_owner = NULL,
        lease_until = NULL,
        last_status = sqlc.narg(status_code),
        last_error = @error,
        finished_at = CASE WHEN @state::text = 'pending' THEN NULL ELSE now() END
    WHERE id = @delivery_id AND lease_owner = @owner AND attempts = @attempt
    RETURNING id
)
INSERT INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, status_code, error)
SELECT id, @attempt, @started_at, @duration_ms, sqlc.narg(status_code), @error
FROM updated;

-- name: ListWebhookDeliveries :many
-- A webhook's deliveries, newest first, after the keyset cursor.
SELECT d.id, d.webhook_id, d.run_id, d.event_id, d.event, d.step, d.state, d.attempts,
       d.next_attempt_at, d.last_status, d.last_error, d.created_at, d.finished_at
FROM webhook_deliveries d
WHERE d.webhook_id = @webhook_id
  AND (d.created_at, d.id) < (COALESCE(sqlc.narg(cursor_created_at)::timestamptz, 'infinity'), COALESCE(sqlc.narg(cursor_id)::text, ''))
ORDER BY d.created_at DESC, d.id DESC
LIMIT @max_rows;

-- name: ListWebhookAttempts :many
SELECT * FROM webhook_attempts
WHERE delivery_id = ANY (@delivery_ids::text[])
ORDER BY delivery_id, attempt;

-- name: DeleteFinishedWebhookDeliveries :execrows
-- Prunes the delivery log: deliveries that ended before @before.
DELETE FROM webhook_deliveries
WHERE id IN (
    SELECT f.id FROM webhook_deliveries f
    WHERE f.state <> 'pending' AND f.finished_at < @before::timestamptz
    LIMIT @max_rows
);

-- name: ListWebhookSecrets :many
-- Every webhook's stored secret (sealed or, from before sealing, clear),
-- to seal or rewrap them (key rotation).
SELECT id, secret FROM webhooks ORDER BY id;

-- name: ReplaceWebhookSecret :execrows
-- Stores a webhook's secret sealed anew, unless it changed meanwhile.
UPDATE webhooks SET secret = @sealed WHERE id = @id AND secret = @old;
