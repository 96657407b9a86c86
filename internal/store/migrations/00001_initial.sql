-- Initial catalogue schema. Migrations are embedded in the binary and applied
-- by (*store.Store).Migrate under a Postgres advisory lock.

-- +goose Up
CREATE TABLE projects (
    name        text        PRIMARY KEY,
    description text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tokens (
    id          text        PRIMARY KEY,
    name        text        NOT NULL,
    -- NULL for admin tokens, which are not bound to a project.
    project     text        REFERENCES projects (name) ON DELETE CASCADE,
    role        text        NOT NULL,
    -- SHA-256 of the secret; the secret itself is never stored.
    secret_hash bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    revoked_at  timestamptz,
    CONSTRAINT tokens_secret_hash_key UNIQUE (secret_hash),
    CONSTRAINT tokens_role_check CHECK (role IN ('admin', 'editor', 'viewer')),
    CONSTRAINT tokens_project_check CHECK ((role = 'admin') = (project IS NULL))
);
CREATE INDEX tokens_project_idx ON tokens (project);

CREATE TABLE pipelines (
    project        text        NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    name           text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    latest_version integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (project, name)
);

CREATE TABLE pipeline_versions (
    project    text        NOT NULL,
    pipeline   text        NOT NULL,
    version    integer     NOT NULL CHECK (version > 0),
    -- json, not jsonb: the exact bytes are kept so that digest stays the
    -- SHA-256 of what is served back.
    spec       json        NOT NULL,
    digest     text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text        NOT NULL DEFAULT '',
    PRIMARY KEY (project, pipeline, version),
    FOREIGN KEY (project, pipeline) REFERENCES pipelines (project, name) ON DELETE CASCADE
);

-- No foreign key to projects or pipelines: a run started directly through
-- the Temporal SDK is mirrored here whatever the catalogue knows about it.
CREATE TABLE runs (
    id              text        PRIMARY KEY,
    project         text        NOT NULL,
    pipeline        text,
    version         integer,
    workflow        text        NOT NULL,
    state           text        NOT NULL,
    -- RunStatus.Seq of the last mirrored status; older writes are ignored.
    seq             bigint      NOT NULL DEFAULT 0,
    status          jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    created_by      text        NOT NULL DEFAULT '',
    idempotency_key text,
    request_hash    text        NOT NULL DEFAULT '',
    input           jsonb,
    CONSTRAINT runs_project_idempotency_key_key UNIQUE (project, idempotency_key)
);
-- Keyset pagination (created_at DESC, id DESC) per filter.
CREATE INDEX runs_project_created_idx ON runs (project, created_at DESC, id DESC);
CREATE INDEX runs_project_pipeline_created_idx ON runs (project, pipeline, created_at DESC, id DESC);
CREATE INDEX runs_project_state_created_idx ON runs (project, state, created_at DESC, id DESC);

-- Combined stdout/stderr of step attempts, in chunks addressed by byte offset.
CREATE TABLE step_logs (
    run_id     text        NOT NULL,
    step       text        NOT NULL,
    item       integer     NOT NULL DEFAULT -1, -- -1 when not a forEach item
    attempt    integer     NOT NULL,
    "offset"   bigint      NOT NULL CHECK ("offset" >= 0),
    data       bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step, item, attempt, "offset")
);

CREATE TABLE go_workflows (
    name        text        PRIMARY KEY,
    description text        NOT NULL DEFAULT '',
    task_queue  text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE go_workflows;
DROP TABLE step_logs;
DROP TABLE runs;
DROP TABLE pipeline_versions;
DROP TABLE pipelines;
DROP TABLE tokens;
DROP TABLE projects;
