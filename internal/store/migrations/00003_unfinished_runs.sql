-- +goose Up
-- The reconciler's scan (ListUnfinishedRuns): only unfinished runs, by age.
CREATE INDEX runs_unfinished_updated_idx ON runs (updated_at)
    WHERE state IN ('PENDING', 'RUNNING', 'CANCELLING');

-- +goose Down
DROP INDEX runs_unfinished_updated_idx;
