-- Runs listed by a step's metric (issue 26) read an index instead of
-- every run's status: each scalar metric of a mirrored status is a row
-- here, replaced in the statement that writes the status (MirrorRun,
-- MirrorRunNotify) and deleted with its run (retention, DeleteRun).
-- Only runs of a pipeline have rows (a Go workflow's run is not listed
-- by metric). project, pipeline and created_at are the run's, copied so
-- that a listing is one range of an index read in its order: by value,
-- either way, ties newest first (as ListRunsByMetric* order).
--
-- Runs mirrored before this migration are backfilled from their stored
-- status (the same steps' scalars the listing used to read from it). A
-- status written meanwhile by a gateway or worker of the previous version
-- gets its rows when the run's status is next written by this version.

-- +goose Up
CREATE TABLE run_metrics (
    run_id     text             NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    project    text             NOT NULL,
    pipeline   text             NOT NULL,
    created_at timestamptz      NOT NULL,
    step       text             NOT NULL,
    name       text             NOT NULL,
    value      double precision NOT NULL,
    PRIMARY KEY (run_id, step, name)
);
CREATE INDEX run_metrics_asc_idx
    ON run_metrics (project, pipeline, step, name, value, created_at DESC, run_id DESC);
CREATE INDEX run_metrics_desc_idx
    ON run_metrics (project, pipeline, step, name, value DESC, created_at DESC, run_id DESC);

-- The first step of a name that reported the metric as a number wins, as
-- the listing read it.
INSERT INTO run_metrics (run_id, project, pipeline, created_at, step, name, value)
SELECT DISTINCT ON (r.id, s.st->>'name', sc.key)
       r.id, r.project, r.pipeline, r.created_at, s.st->>'name', sc.key, (sc.value #>> '{}')::float8
FROM runs r
CROSS JOIN LATERAL jsonb_array_elements(
    CASE WHEN jsonb_typeof(r.status->'steps') = 'array' THEN r.status->'steps' ELSE '[]'::jsonb END
) WITH ORDINALITY AS s(st, ord)
CROSS JOIN LATERAL jsonb_each(
    CASE WHEN jsonb_typeof(s.st->'metrics'->'scalars') = 'object' THEN s.st->'metrics'->'scalars' ELSE '{}'::jsonb END
) AS sc(key, value)
WHERE r.pipeline IS NOT NULL
  AND jsonb_typeof(s.st->'name') = 'string'
  AND jsonb_typeof(sc.value) = 'number'
ORDER BY r.id, s.st->>'name', sc.key, s.ord;

-- +goose Down
DROP TABLE run_metrics;
