-- name: UpsertGoWorkflow :exec
INSERT INTO go_workflows (name, description, task_queue, updated_at)
VALUES (@name, @description, @task_queue, now())
ON CONFLICT (name) DO UPDATE
SET description = excluded.description,
    task_queue = excluded.task_queue,
    updated_at = excluded.updated_at;

-- name: GetGoWorkflow :one
SELECT * FROM go_workflows
WHERE name = @name;

-- name: ListGoWorkflows :many
SELECT * FROM go_workflows
ORDER BY name;
