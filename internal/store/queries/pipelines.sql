-- name: EnsurePipeline :exec
INSERT INTO pipelines (project, name)
VALUES (@project, @name)
ON CONFLICT (project, name) DO NOTHING;

-- name: LockPipeline :one
-- Serialises version creation for one pipeline until the transaction ends.
SELECT * FROM pipelines
WHERE project = @project AND name = @name
FOR UPDATE;

-- name: SetPipelineLatestVersion :exec
UPDATE pipelines
SET latest_version = @latest_version, updated_at = now()
WHERE project = @project AND name = @name;

-- name: InsertPipelineVersion :one
INSERT INTO pipeline_versions (project, pipeline, version, spec, digest, created_by)
VALUES (@project, @pipeline, @version, @spec, @digest, @created_by)
RETURNING *;

-- name: GetPipeline :one
SELECT * FROM pipelines
WHERE project = @project AND name = @name AND latest_version > 0;

-- name: ListPipelines :many
SELECT * FROM pipelines
WHERE project = @project AND latest_version > 0
ORDER BY name;

-- name: GetPipelineVersion :one
SELECT * FROM pipeline_versions
WHERE project = @project AND pipeline = @pipeline AND version = @version;

-- name: GetLatestPipelineVersion :one
SELECT * FROM pipeline_versions
WHERE project = @project AND pipeline = @pipeline
ORDER BY version DESC
LIMIT 1;
