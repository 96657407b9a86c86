-- Deleting a model version (issue 26): the row stays, marked deleted, so
-- that a version number is never given twice (numbering counts deleted
-- versions) and lineage still names what a run once registered. A deleted
-- version no longer resolves (model: name@3, aliases, the latest) and is
-- not listed. Registering its artifact again restores it. The artifact's
-- bytes follow the artifact's own retention (its run's).

-- +goose Up
ALTER TABLE model_versions ADD COLUMN deleted_at timestamptz;
ALTER TABLE model_versions ADD COLUMN deleted_by text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE model_versions DROP COLUMN deleted_by;
ALTER TABLE model_versions DROP COLUMN deleted_at;
