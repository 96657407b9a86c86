-- name: CreateProject :one
INSERT INTO projects (name, description)
VALUES (@name, @description)
RETURNING *;

-- name: GetProject :one
SELECT * FROM projects
WHERE name = @name;

-- name: ListProjects :many
SELECT * FROM projects
ORDER BY name;
