-- The schedule that started a run (RunStatus.ScheduleID, written by the
-- mirror from the run's first status), so that a schedule's runs can be
-- listed (GET …/runs?schedule=NAME). Runs not started by a schedule have
-- NULL. Two indexes in the keyset order, as 00005's: the schedule alone
-- and with state (a schedule's failed runs); pipeline and createdBy, which
-- a schedule fixes, are filtered within the schedule's range.
--
-- The column is added without a default (no table rewrite); existing
-- scheduled runs get theirs from their stored status (one pass over the
-- runs table, writing only scheduled runs). Indexes are built
-- CONCURRENTLY, as in 00005 (docs/operations.md says how to rebuild an
-- index left INVALID by an interrupted build).

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE runs ADD COLUMN IF NOT EXISTS schedule text;
UPDATE runs SET schedule = status->>'scheduleId'
    WHERE schedule IS NULL AND status ? 'scheduleId' AND status->>'scheduleId' <> '';
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_project_schedule_created_idx
    ON runs (project, schedule, created_at DESC, id DESC) WHERE schedule IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_project_schedule_state_created_idx
    ON runs (project, schedule, state, created_at DESC, id DESC) WHERE schedule IS NOT NULL;
CREATE OR REPLACE VIEW run_summaries AS
    SELECT id, project, pipeline, version, workflow, state, created_at, updated_at, created_by, schedule
    FROM runs;

-- +goose Down
DROP VIEW IF EXISTS run_summaries;
CREATE VIEW run_summaries AS
    SELECT id, project, pipeline, version, workflow, state, created_at, updated_at, created_by
    FROM runs;
DROP INDEX CONCURRENTLY IF EXISTS runs_project_schedule_state_created_idx;
DROP INDEX CONCURRENTLY IF EXISTS runs_project_schedule_created_idx;
ALTER TABLE runs DROP COLUMN IF EXISTS schedule;
