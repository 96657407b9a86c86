-- name: PutSecret :one
-- Creates or replaces a secret; created says which.
INSERT INTO project_secrets AS s (project, name, key_id, data_key, nonce, ciphertext, updated_by)
VALUES (@project, @name, @key_id, @data_key, @nonce, @ciphertext, @updated_by)
ON CONFLICT (project, name) DO UPDATE
SET key_id = EXCLUDED.key_id, data_key = EXCLUDED.data_key, nonce = EXCLUDED.nonce,
    ciphertext = EXCLUDED.ciphertext, updated_by = EXCLUDED.updated_by,
    version = s.version + 1, updated_at = now()
RETURNING project, name, version, created_at, updated_at, updated_by, (xmax = 0)::boolean AS created;

-- name: DeleteSecret :execrows
DELETE FROM project_secrets WHERE project = @project AND name = @name;

-- name: GetSecretInfo :one
SELECT project, name, version, created_at, updated_at, updated_by
FROM project_secrets WHERE project = @project AND name = @name;

-- name: ListSecrets :many
SELECT project, name, version, created_at, updated_at, updated_by
FROM project_secrets WHERE project = @project
ORDER BY name;

-- name: GetSealedSecrets :many
-- The sealed form of the named secrets of one project (those that exist).
SELECT name, key_id, data_key, nonce, ciphertext
FROM project_secrets WHERE project = @project AND name = ANY(@names::text[]);

-- name: ListSealedSecretsForRewrap :many
-- Secrets not sealed with the current key, a page at a time (rotation).
SELECT project, name, key_id, data_key, nonce, ciphertext
FROM project_secrets WHERE key_id <> @current_key_id
ORDER BY project, name
LIMIT @max_rows;

-- name: RewrapSecret :execrows
-- Replaces a secret's data key if it is still the one that was read.
UPDATE project_secrets SET key_id = @key_id, data_key = @data_key
WHERE project = @project AND name = @name AND key_id = @old_key_id;

-- name: InsertSecretEvent :exec
INSERT INTO secret_events (project, name, action, actor) VALUES (@project, @name, @action, @actor);

-- name: ListSecretEvents :many
SELECT name, action, actor, at FROM secret_events
WHERE project = @project
ORDER BY id DESC
LIMIT @max_rows;
