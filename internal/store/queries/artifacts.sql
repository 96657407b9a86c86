-- name: InsertArtifacts :exec
-- Records artifacts a run wrote; one already recorded is kept as it is.
INSERT INTO artifacts (project, id, run_id, step, item, attempt, name, type, digest, size, files, source)
SELECT @project, unnest(@ids::text[]), @run_id, unnest(@steps::text[]), unnest(@items::int[]),
       unnest(@attempts::int[]), unnest(@names::text[]), unnest(@types::text[]), unnest(@digests::text[]),
       unnest(@sizes::bigint[]), unnest(@files::int[]), unnest(@sources::text[])
ON CONFLICT (project, id) DO NOTHING;

-- name: InsertArtifactUses :exec
-- Records the artifacts a run's steps read; a use already recorded is kept.
INSERT INTO artifact_uses (project, artifact_id, run_id, step, item, input)
SELECT @project, unnest(@artifact_ids::text[]), @run_id, unnest(@steps::text[]), unnest(@items::int[]),
       unnest(@inputs::text[])
ON CONFLICT (project, run_id, step, item, input) DO NOTHING;

-- name: GetArtifact :one
SELECT * FROM artifacts WHERE project = @project AND id = @id;

-- name: ListRunArtifacts :many
-- What a run wrote, in the order its steps wrote it.
SELECT * FROM artifacts WHERE project = @project AND run_id = @run_id
ORDER BY created_at, step, item, name;

-- name: ListRunArtifactUses :many
-- What a run read: each use with the artifact it read (absent when the
-- producer's rows were deleted with its run).
SELECT u.step AS use_step, u.item AS use_item, u.input, u.created_at AS used_at, sqlc.embed(a)
FROM artifact_uses AS u
JOIN artifacts AS a ON a.project = u.project AND a.id = u.artifact_id
WHERE u.project = @project AND u.run_id = @run_id
ORDER BY u.created_at, u.step, u.item, u.input;

-- name: ListArtifactConsumers :many
-- Who read an artifact, oldest first, at most @max_rows.
SELECT run_id, step, item, input, created_at FROM artifact_uses
WHERE project = @project AND artifact_id = @artifact_id
ORDER BY created_at, run_id, step, item, input
LIMIT @max_rows;

-- name: ListStepInputs :many
-- What a step (item) of a run read: the inputs an artifact was made from.
SELECT u.input, sqlc.embed(a)
FROM artifact_uses AS u
JOIN artifacts AS a ON a.project = u.project AND a.id = u.artifact_id
WHERE u.project = @project AND u.run_id = @run_id AND u.step = @step AND u.item = @item
ORDER BY u.input;

-- name: ListLiveArtifactDigests :many
-- Every digest the project's catalogue still references: artifacts of its
-- runs, those handed on by its step cache entries, and its registered
-- model versions (not deleted), which outlive their runs: endpoints serve
-- them; and what an import stored or reused in the last day (the run
-- that reads it may have no lineage row yet: activities/imports). files >
-- 0 marks a directory (its manifest references its files' digests).
SELECT DISTINCT r.digest, r.files FROM artifacts AS r WHERE r.project = @project
UNION
SELECT DISTINCT e.value->>'digest' AS digest, COALESCE((e.value->>'files')::int, 0) AS files
FROM step_cache AS c, jsonb_array_elements(c.artifacts) AS e
WHERE c.project = @project AND c.artifacts IS NOT NULL
UNION
SELECT DISTINCT v.digest, v.files FROM model_versions AS v
WHERE v.project = @project AND v.deleted_at IS NULL
UNION
SELECT DISTINCT i.digest, i.files FROM artifact_imports AS i
WHERE i.project = @project AND i.updated_at > now() - interval '1 day';

-- name: ArtifactBytesUsed :one
-- The bytes a project's artifacts take, each content once (a directory
-- counts its files' bytes).
SELECT COALESCE(SUM(t.size), 0)::bigint FROM (
    SELECT DISTINCT ON (r.digest) r.size FROM artifacts AS r WHERE r.project = @project
) AS t;

-- name: GetArtifactImport :one
-- What an import of @uri last stored in the project, and the source's
-- fingerprint then.
SELECT * FROM artifact_imports WHERE project = @project AND uri = @uri;

-- name: UpsertArtifactImport :exec
INSERT INTO artifact_imports (project, uri, fingerprint, digest, size, files)
VALUES (@project, @uri, @fingerprint, @digest, @size, @files)
ON CONFLICT (project, uri) DO UPDATE
SET fingerprint = EXCLUDED.fingerprint, digest = EXCLUDED.digest, size = EXCLUDED.size,
    files = EXCLUDED.files, updated_at = now();
