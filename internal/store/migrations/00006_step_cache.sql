-- Step cache (issue 9): the outputs of successful step executions, by the
-- hash of the step's rendered work, per project. A later run of the same
-- work in the same project reuses the outputs instead of running the step
-- (workflows/cache.go). One entry per key: a newer result replaces it.
--
-- No foreign key to projects, like runs: a run started through the
-- Temporal SDK caches under whatever project it names.

-- +goose Up
CREATE TABLE step_cache (
    project    text        NOT NULL,
    -- Hex SHA-256 of the step's rendered work (workflows.cacheKeyDoc).
    key        text        NOT NULL,
    -- Where the result came from, for listing, filtering and the CACHED
    -- step's source: the pipeline (or Go workflow), step, forEach item
    -- (-1: none), run and attempt that produced it.
    pipeline   text        NOT NULL DEFAULT '',
    step       text        NOT NULL,
    item       integer     NOT NULL DEFAULT -1,
    run_id     text        NOT NULL,
    attempt    integer     NOT NULL,
    outputs    jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL,
    -- NULL: never expires (the step had no ttl).
    expires_at timestamptz,
    PRIMARY KEY (project, key),
    CONSTRAINT step_cache_outputs_check CHECK (jsonb_typeof(outputs) = 'object')
);
-- Listing and eviction by pipeline and step, newest first (keyset).
CREATE INDEX step_cache_project_created_idx ON step_cache (project, created_at DESC, key DESC);
CREATE INDEX step_cache_project_pipeline_step_idx ON step_cache (project, pipeline, step, created_at DESC, key DESC);
-- The sweep of expired entries.
CREATE INDEX step_cache_expires_idx ON step_cache (expires_at) WHERE expires_at IS NOT NULL;

-- +goose Down
DROP TABLE step_cache;
