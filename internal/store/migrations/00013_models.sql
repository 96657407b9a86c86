-- Model registry (issue 26, first slice): a project's registered models,
-- their immutable versions (each an artifact: digest, size, and the run,
-- step and attempt that wrote it), and aliases (champion, candidate, ...)
-- moved atomically with a history of who moved them.
--
-- A version is created over REST from an artifact ID, or by the run mirror
-- when a step's output declares `register: <model>` (store.MirrorRun): the
-- same artifact registers once per model (unique artifact_id).

-- +goose Up
CREATE TABLE models (
    project     text        NOT NULL,
    name        text        NOT NULL,
    description text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    created_by  text        NOT NULL DEFAULT '',
    PRIMARY KEY (project, name)
);

CREATE TABLE model_versions (
    project     text        NOT NULL,
    model       text        NOT NULL,
    version     integer     NOT NULL,
    artifact_id text        NOT NULL,
    digest      text        NOT NULL,
    size        bigint      NOT NULL,
    files       integer     NOT NULL DEFAULT 0,
    run_id      text        NOT NULL,
    step        text        NOT NULL,
    item        integer     NOT NULL DEFAULT -1,
    attempt     integer     NOT NULL,
    -- a hint for serving: vllm, triton, ... (free text)
    format      text        NOT NULL DEFAULT '',
    metadata    jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    created_by  text        NOT NULL DEFAULT '',
    PRIMARY KEY (project, model, version),
    UNIQUE (project, model, artifact_id),
    FOREIGN KEY (project, model) REFERENCES models (project, name) ON DELETE CASCADE
);

CREATE TABLE model_aliases (
    project    text        NOT NULL,
    model      text        NOT NULL,
    alias      text        NOT NULL,
    version    integer     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text        NOT NULL DEFAULT '',
    PRIMARY KEY (project, model, alias),
    FOREIGN KEY (project, model, version) REFERENCES model_versions (project, model, version)
);

CREATE TABLE model_alias_events (
    id      bigserial   PRIMARY KEY,
    project text        NOT NULL,
    model   text        NOT NULL,
    alias   text        NOT NULL,
    -- the version it pointed at before (NULL: new) and after (NULL: removed)
    from_version integer,
    to_version   integer,
    actor   text        NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX model_alias_events_idx ON model_alias_events (project, model, id DESC);

-- +goose Down
DROP TABLE model_alias_events;
DROP TABLE model_aliases;
DROP TABLE model_versions;
DROP TABLE models;
