-- name: CreateToken :one
INSERT INTO tokens (id, name, project, role, secret_hash, expires_at)
VALUES (@id, @name, sqlc.narg(project), @role, @secret_hash, sqlc.narg(expires_at))
RETURNING *;

-- name: TokenBySecretHash :one
-- Only live tokens: neither revoked nor expired.
SELECT * FROM tokens
WHERE secret_hash = @secret_hash
  AND revoked_at IS NULL
  AND (expires_at IS NULL OR expires_at > now());

-- name: RevokeToken :execrows
-- Idempotent: revoking twice keeps the first revocation time.
UPDATE tokens
SET revoked_at = COALESCE(revoked_at, now())
WHERE id = @id;

-- name: EnsureAdminToken :exec
-- Makes the secret a live admin token whatever its previous state.
INSERT INTO tokens (id, name, project, role, secret_hash)
VALUES (@id, @name, NULL, 'admin', @secret_hash)
ON CONFLICT (secret_hash) DO UPDATE
SET name = excluded.name,
    project = NULL,
    role = 'admin',
    expires_at = NULL,
    revoked_at = NULL;
