-- Webhooks: a project's subscriptions to run events (run.finished,
-- step.failed, approval.requested), and the transactional outbox of their
-- deliveries. Deliveries are written by the statement that mirrors a
-- run's status (MirrorRunNotify), so an event is queued if and only if the
-- status that shows it is stored; the gateways' dispatchers deliver them
-- (internal/services/webhooks), leasing each so that no two gateways send it at
-- once.

-- +goose Up
CREATE TABLE webhooks (
    id          text        PRIMARY KEY,
    project     text        NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    url         text        NOT NULL,
    -- Event types delivered (catalog.WebhookEvents).
    events      text[]      NOT NULL,
    -- Only runs of this pipeline (a declarative pipeline's name or a Go
    -- workflow's registered name); NULL: every run of the project.
    pipeline    text,
    -- The HMAC-SHA256 key of the signature header. Kept as is: signing
    -- needs it; the API never returns it after creation.
    secret      text        NOT NULL,
    description text        NOT NULL DEFAULT '',
    enabled     boolean     NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    created_by  text        NOT NULL DEFAULT ''
);
CREATE INDEX webhooks_project_idx ON webhooks (project, created_at, id);

CREATE TABLE webhook_deliveries (
    id              text        PRIMARY KEY,
    webhook_id      text        NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    project         text        NOT NULL,
    run_id          text        NOT NULL,
    -- The event's ID: the same for every webhook and every attempt (the
    -- receiver deduplicates on it); one delivery per webhook and event.
    event_id        text        NOT NULL,
    event           text        NOT NULL,
    step            text,
    -- json, not jsonb: every attempt sends (and signs) the same bytes.
    payload         json        NOT NULL,
    -- pending (waiting for an attempt or in one), succeeded, failed.
    state           text        NOT NULL DEFAULT 'pending',
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    -- The gateway delivering it now, until lease_until (then another may).
    lease_owner     text,
    lease_until     timestamptz,
    last_status     integer,
    last_error      text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    CONSTRAINT webhook_deliveries_event_key UNIQUE (webhook_id, event_id),
    CONSTRAINT webhook_deliveries_state_check CHECK (state IN ('pending', 'succeeded', 'failed'))
);
-- The dispatchers' queue: due deliveries, soonest first.
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
-- The delivery log of a webhook, newest first (keyset).
CREATE INDEX webhook_deliveries_log_idx ON webhook_deliveries (webhook_id, created_at DESC, id DESC);
-- Pruning finished deliveries.
CREATE INDEX webhook_deliveries_finished_idx ON webhook_deliveries (finished_at) WHERE state <> 'pending';

CREATE TABLE webhook_attempts (
    delivery_id text        NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt     integer     NOT NULL,
    started_at  timestamptz NOT NULL,
    duration_ms integer     NOT NULL,
    -- The receiver's HTTP status; NULL when none came (connection refused,
    -- timeout, refused address).
    status_code integer,
    error       text        NOT NULL DEFAULT '',
    PRIMARY KEY (delivery_id, attempt)
);

-- +goose Down
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhooks;
