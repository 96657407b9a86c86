-- Imported artifacts (issue 23): an input may name a URI outside the
-- project's store (pipeline.ArtifactInput.URI). The worker imports its
-- bytes before the step; the mirror records them as an artifact of the
-- importing step (attempt 0, before any attempt ran), and source keeps
-- the URI they came from, for lineage ("who made this": an import of
-- that URI). Empty for what a step wrote.

-- +goose Up
ALTER TABLE artifacts ADD COLUMN source text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE artifacts DROP COLUMN source;
