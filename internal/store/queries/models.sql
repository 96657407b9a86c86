-- name: EnsureModel :exec
INSERT INTO models (project, name, description, created_by)
VALUES (@project, @name, @description, @created_by)
ON CONFLICT (project, name) DO NOTHING;

-- name: LockModel :one
-- Serializes version numbering of one model.
SELECT name FROM models WHERE project = @project AND name = @name FOR UPDATE;

-- name: GetModel :one
SELECT m.*, (SELECT COALESCE(MAX(v.version), 0) FROM model_versions AS v WHERE v.project = m.project AND v.model = m.name AND v.deleted_at IS NULL)::int AS latest
FROM models AS m WHERE m.project = @project AND m.name = @name;

-- name: ListModels :many
-- Each model with its aliases (alias -> version) as one JSON object: the
-- list and its aliases are read in one statement, so from one snapshot.
SELECT m.*, (SELECT COALESCE(MAX(v.version), 0) FROM model_versions AS v WHERE v.project = m.project AND v.model = m.name AND v.deleted_at IS NULL)::int AS latest,
    (SELECT COALESCE(jsonb_object_agg(a.alias, a.version), '{}'::jsonb) FROM model_aliases AS a WHERE a.project = m.project AND a.model = m.name)::jsonb AS aliases
FROM models AS m WHERE m.project = @project ORDER BY m.name;

-- name: GetModelVersionByArtifact :one
SELECT * FROM model_versions WHERE project = @project AND model = @model AND artifact_id = @artifact_id;

-- name: InsertModelVersion :one
INSERT INTO model_versions (project, model, version, artifact_id, digest, size, files, run_id, step, item, attempt, format, metadata, created_by)
SELECT @project, @model, COALESCE(MAX(version), 0) + 1, @artifact_id, @digest, @size, @files, @run_id, @step, @item, @attempt, @format, @metadata, @created_by
FROM model_versions WHERE project = @project AND model = @model
RETURNING *;

-- name: GetModelVersion :one
SELECT * FROM model_versions WHERE project = @project AND model = @model AND version = @version AND deleted_at IS NULL;

-- name: ListModelVersions :many
SELECT * FROM model_versions WHERE project = @project AND model = @model AND deleted_at IS NULL ORDER BY version DESC;

-- name: ListModelVersionsOfArtifact :many
SELECT * FROM model_versions WHERE project = @project AND artifact_id = @artifact_id AND deleted_at IS NULL ORDER BY model, version;

-- name: DeleteModelVersion :execrows
UPDATE model_versions SET deleted_at = now(), deleted_by = @deleted_by
WHERE project = @project AND model = @model AND version = @version AND deleted_at IS NULL;

-- name: RestoreModelVersion :one
UPDATE model_versions SET deleted_at = NULL, deleted_by = ''
WHERE project = @project AND model = @model AND version = @version
RETURNING *;

-- name: ListModelAliases :many
SELECT * FROM model_aliases WHERE project = @project AND model = @model ORDER BY alias;

-- name: GetModelAlias :one
SELECT * FROM model_aliases WHERE project = @project AND model = @model AND alias = @alias;

-- name: GetModelAliasForUpdate :one
SELECT * FROM model_aliases WHERE project = @project AND model = @model AND alias = @alias FOR UPDATE;

-- name: PutModelAlias :exec
INSERT INTO model_aliases (project, model, alias, version, updated_by)
VALUES (@project, @model, @alias, @version, @updated_by)
ON CONFLICT (project, model, alias) DO UPDATE
SET version = EXCLUDED.version, updated_by = EXCLUDED.updated_by, updated_at = now();

-- name: DeleteModelAlias :execrows
DELETE FROM model_aliases WHERE project = @project AND model = @model AND alias = @alias;

-- name: InsertModelAliasEvent :exec
INSERT INTO model_alias_events (project, model, alias, from_version, to_version, actor)
VALUES (@project, @model, @alias, sqlc.narg(from_version), sqlc.narg(to_version), @actor);

-- name: ListModelAliasEvents :many
SELECT * FROM model_alias_events WHERE project = @project AND model = @model
ORDER BY id DESC LIMIT @max_rows;

-- name: ShareLiveModelVersion :one
-- A reference to a version holds its row FOR SHARE until it commits: a
-- deletion (LockLiveModelVersion) waits for it, and a version deleted
-- meanwhile is no row (deleted_at is checked again after the wait).
SELECT version FROM model_versions
WHERE project = @project AND model = @model AND version = @version AND deleted_at IS NULL FOR SHARE;

-- name: LockLiveModelVersion :one
SELECT version FROM model_versions
WHERE project = @project AND model = @model AND version = @version AND deleted_at IS NULL FOR UPDATE;

-- name: PutModelVersionRef :exec
INSERT INTO model_version_refs (project, model, version, endpoint)
VALUES (@project, @model, @version, @endpoint)
ON CONFLICT (project, model, version, endpoint) DO UPDATE SET reserved_at = now();

-- name: ListModelVersionRefs :many
SELECT * FROM model_version_refs
WHERE project = @project AND model = @model AND version = @version ORDER BY endpoint;

-- name: ListModelRefs :many
SELECT * FROM model_version_refs
WHERE project = @project AND model = @model ORDER BY endpoint, version;

-- name: DeleteEndpointModelRefs :execrows
DELETE FROM model_version_refs
WHERE project = @project AND endpoint = @endpoint AND reserved_at < @before;

-- name: DeleteModelVersionRef :execrows
DELETE FROM model_version_refs
WHERE project = @project AND model = @model AND version = @version AND endpoint = @endpoint AND reserved_at < @before;

-- name: ListModelRefsReservedBefore :many
-- The sweeper's candidates, every project (it checks each endpoint
-- against its own workflow, then deletes project-scoped), a page after
-- the key (project, endpoint, model, version) it stopped at.
SELECT * FROM model_version_refs WHERE reserved_at < @before
    AND (project, endpoint, model, version) > (@after_project::text, @after_endpoint::text, @after_model::text, @after_version::int)
ORDER BY project, endpoint, model, version LIMIT @max_rows;
