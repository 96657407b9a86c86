-- Items of wide forEach steps (more than spec.WideThreshold items; see
-- docs/architecture.md, "Wide forEach"): their batch workflows write one
-- row per finished item, in batches, instead of carrying every item in the
-- run's status. Keyed for the items endpoint's keyset pages (by index,
-- optionally of one state) and for a reducer's read of all outputs in
-- index order. Items that never started have no row.

-- +goose Up
CREATE TABLE step_items (
    run_id      text        NOT NULL,
    step        text        NOT NULL,
    idx         integer     NOT NULL CHECK (idx >= 0),
    state       text        NOT NULL,
    item        jsonb       NOT NULL, -- the forEach element (JSON null allowed)
    attempts    jsonb       NOT NULL, -- [workflows.Attempt]
    error       text        NOT NULL DEFAULT '',
    message     text        NOT NULL DEFAULT '',
    outputs     jsonb       NOT NULL, -- the item's outputs object, or JSON null
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, step, idx)
);
CREATE INDEX step_items_state_idx ON step_items (run_id, step, state, idx);

-- +goose Down
DROP TABLE step_items;
