-- A cached step's metrics (issue 26): a cache hit shows what the source
-- execution measured, so runs served from the cache compare and sort by
-- their metrics like the others.

-- +goose Up
ALTER TABLE step_cache ADD COLUMN metrics jsonb;

-- +goose Down
ALTER TABLE step_cache DROP COLUMN metrics;
