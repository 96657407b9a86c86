-- Which endpoints reference which model versions (issue 26): one row per
-- endpoint and model version that any of its revisions serves, or that an
-- update in flight is about to serve (a reservation, recorded before the
-- update is submitted). An endpoint keeps every revision it made (a
-- rollback may go back to any), so a row stays while its endpoint exists.
--
-- Deleting a version and recording a reference serialize on the version's
-- row: a reference takes it FOR SHARE and needs it live (deleted_at IS
-- NULL); a deletion takes it FOR UPDATE, then refuses while a row here
-- names it (store.DeleteModelVersion). So no reference is recorded between
-- the check and the deletion, and none to a deleted version.
--
-- Rows are removed when the endpoint is deleted (the gateway's DELETE) and
-- by the gateway's sweeper (internal/services/modelrefs) once they are
-- older than a grace period and no revision of their endpoint serves the
-- version (an update refused after its reservation, an endpoint ended
-- outside Atelier).

-- +goose Up
CREATE TABLE model_version_refs (
    project     text        NOT NULL,
    model       text        NOT NULL,
    version     int         NOT NULL,
    endpoint    text        NOT NULL,
    reserved_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project, model, version, endpoint),
    FOREIGN KEY (project, model, version) REFERENCES model_versions (project, model, version) ON DELETE CASCADE
);
CREATE INDEX model_version_refs_endpoint_idx ON model_version_refs (project, endpoint);
CREATE INDEX model_version_refs_reserved_idx ON model_version_refs (reserved_at);

-- +goose Down
DROP TABLE model_version_refs;
