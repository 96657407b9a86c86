-- The artifacts each item of a wide forEach step wrote (issue 23): their
-- references ([runstate.Artifact], digest and size, never bytes), kept
-- with the item's row so that a step reading the wide step's artifact (a
-- fan-in) can build its directory from Postgres, and so that a retry that
-- reuses an item (ReuseStepItems) reuses its artifacts with its outputs.
-- The same artifacts get lineage rows (artifacts) when the batch records
-- the item. '[]' for items that wrote none, and for rows from before.

-- +goose Up
ALTER TABLE step_items ADD COLUMN artifacts jsonb NOT NULL DEFAULT '[]'::jsonb;

-- +goose Down
ALTER TABLE step_items DROP COLUMN artifacts;
