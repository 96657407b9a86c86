-- Artifacts (issue 23): lineage of the files and directories steps write
-- and read. The bytes are in the project's object store by digest
-- (internal/platform/artifactstore); these rows say which run, step, item
-- and attempt wrote each artifact (artifacts) and which steps read it
-- (artifact_uses). The run mirror writes both from run status
-- (store.MirrorRun), idempotently: an artifact's id is computed from its
-- producer (runstate.ArtifactID).
--
-- No foreign key to runs, like step_cache: a run started through the
-- Temporal SDK records under whatever project it names; deleting a run
-- deletes its rows (DeleteRun, retention).

-- +goose Up
CREATE TABLE artifacts (
    project    text        NOT NULL,
    id         text        NOT NULL,
    run_id     text        NOT NULL,
    step       text        NOT NULL,
    item       integer     NOT NULL DEFAULT -1,
    attempt    integer     NOT NULL,
    name       text        NOT NULL,
    -- file, dataset, model, metrics (pipeline.ArtifactType)
    type       text        NOT NULL,
    digest     text        NOT NULL,
    size       bigint      NOT NULL,
    -- 0 for a file, else how many files the directory holds
    files      integer     NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project, id)
);
CREATE INDEX artifacts_run_idx ON artifacts (project, run_id);
-- Retention: is a digest still referenced in the project?
CREATE INDEX artifacts_digest_idx ON artifacts (project, digest);

CREATE TABLE artifact_uses (
    project     text        NOT NULL,
    artifact_id text        NOT NULL,
    run_id      text        NOT NULL,
    step        text        NOT NULL,
    item        integer     NOT NULL DEFAULT -1,
    -- the consumer's input name ($ATELIER_INPUTS/<input>)
    input       text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project, run_id, step, item, input)
);
CREATE INDEX artifact_uses_artifact_idx ON artifact_uses (project, artifact_id, created_at);

-- A cached step's artifacts (references), reused with its outputs.
ALTER TABLE step_cache ADD COLUMN artifacts jsonb;

-- +goose Down
ALTER TABLE step_cache DROP COLUMN artifacts;
DROP TABLE artifact_uses;
DROP TABLE artifacts;
