-- Listing at scale: one index per combination of the equality filters
-- ListRuns offers (pipeline, state, createdBy; project is always given),
-- each ending in the keyset order (created_at DESC, id DESC), so that
-- every combination, with or without a createdAfter/createdBefore window
-- and a page cursor, is a single index range read in order: no Sort, no
-- scan of rows that do not match. 00001 made (project), (project,
-- pipeline) and (project, state); these are the other five. Plus the
-- retention sweep's partial index on finished runs, and run_summaries,
-- the columns a list page needs (not the status and input documents).
--
-- CONCURRENTLY so that upgrading a gateway over a large runs table does
-- not block writes while the indexes build (goose runs each statement on
-- its own, outside a transaction). IF NOT EXISTS makes a retry after an
-- interrupted build succeed; an interrupted CONCURRENTLY build leaves an
-- INVALID index behind, which docs/operations.md says how to rebuild.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_project_pipeline_state_created_idx
    ON runs (project, pipeline, state, created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_project_creator_created_idx
    ON runs (project, created_by, created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_project_creator_state_created_idx
    ON runs (project, created_by, state, created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_project_creator_pipeline_created_idx
    ON runs (project, created_by, pipeline, created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_project_creator_pipeline_state_created_idx
    ON runs (project, created_by, pipeline, state, created_at DESC, id DESC);
-- Retention (DeleteFinishedRuns): finished runs by the time of their last
-- write, oldest first.
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_finished_updated_idx ON runs (updated_at)
    WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'TERMINATED');
CREATE OR REPLACE VIEW run_summaries AS
    SELECT id, project, pipeline, version, workflow, state, created_at, updated_at, created_by
    FROM runs;

-- +goose Down
DROP VIEW IF EXISTS run_summaries;
DROP INDEX CONCURRENTLY IF EXISTS runs_finished_updated_idx;
DROP INDEX CONCURRENTLY IF EXISTS runs_project_creator_pipeline_state_created_idx;
DROP INDEX CONCURRENTLY IF EXISTS runs_project_creator_pipeline_created_idx;
DROP INDEX CONCURRENTLY IF EXISTS runs_project_creator_state_created_idx;
DROP INDEX CONCURRENTLY IF EXISTS runs_project_creator_created_idx;
DROP INDEX CONCURRENTLY IF EXISTS runs_project_pipeline_state_created_idx;
