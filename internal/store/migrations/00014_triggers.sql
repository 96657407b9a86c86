-- Triggers: a project's automatic starts of a pipeline when something
-- happens: a run of another pipeline finished (kind 'run'), or a signed
-- request reached the trigger's inbound URL (kind 'hook'). Each occurrence
-- is one firing, an outbox row: a run's firings are written by the
-- statement that mirrors its final status (MirrorRunNotify), one per
-- trigger and upstream run (the same key whatever retries or restarts
-- write it again); the gateways' dispatchers start the runs
-- (internal/services/triggers), each firing's run with the firing's ID as
-- its Idempotency-Key, so a firing never starts two runs.

-- +goose Up
CREATE TABLE triggers (
    id          text        PRIMARY KEY,
    project     text        NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    name        text        NOT NULL,
    -- run: fires when a run of on_pipeline ends in one of on_states;
    -- hook: fires on a signed POST to its inbound URL.
    kind        text        NOT NULL,
    on_pipeline text,
    on_states   text[],
    -- What a firing starts: the newest version of pipeline, or version.
    pipeline    text        NOT NULL,
    version     integer,
    -- The started run's params: JSON values, strings may hold {{ }}
    -- templates over the firing (upstream run or request body).
    params      jsonb       NOT NULL DEFAULT '{}',
    -- hook: the HMAC-SHA256 key of the signature (sealed like a webhook's
    -- secret); never returned after creation.
    secret      text        NOT NULL DEFAULT '',
    -- At most this many runs started per minute (a loop through two
    -- pipelines' triggers, or a flood of requests, slows down instead of
    -- flooding the engine).
    max_per_minute integer  NOT NULL DEFAULT 60,
    enabled     boolean     NOT NULL DEFAULT true,
    description text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    created_by  text        NOT NULL DEFAULT '',
    CONSTRAINT triggers_name_key UNIQUE (project, name),
    CONSTRAINT triggers_kind_check CHECK (kind IN ('run', 'hook'))
);
-- The mirror's lookup: the enabled run triggers of a project's pipeline.
CREATE INDEX triggers_on_idx ON triggers (project, on_pipeline) WHERE kind = 'run' AND enabled;

CREATE TABLE trigger_firings (
    id              text        PRIMARY KEY,
    trigger_id      text        NOT NULL REFERENCES triggers (id) ON DELETE CASCADE,
    project         text        NOT NULL,
    -- The upstream run (kind run), or the request's delivery ID (hook).
    source          text        NOT NULL,
    -- What templates read: the upstream run's summary or the request body.
    payload         jsonb       NOT NULL,
    -- pending (waiting or being started), started, failed.
    state           text        NOT NULL DEFAULT 'pending',
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_owner     text,
    lease_until     timestamptz,
    run_id          text,
    -- The params the started run got (rendered from the payload).
    params          jsonb,
    error           text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    CONSTRAINT trigger_firings_source_key UNIQUE (trigger_id, source),
    CONSTRAINT trigger_firings_state_check CHECK (state IN ('pending', 'started', 'failed'))
);
CREATE INDEX trigger_firings_due_idx ON trigger_firings (next_attempt_at) WHERE state = 'pending';
CREATE INDEX trigger_firings_log_idx ON trigger_firings (trigger_id, created_at DESC, id DESC);
-- The rate limit: a trigger's runs started in the last minute.
CREATE INDEX trigger_firings_started_idx ON trigger_firings (trigger_id, finished_at) WHERE state = 'started';

-- +goose Down
DROP TABLE trigger_firings;
DROP TABLE triggers;
