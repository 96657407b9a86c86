-- name: UpsertCluster :one
-- Registers a cluster or refreshes its registration. A NULL description or
-- labels keeps the stored value, so a restarting worker does not wipe what
-- an admin set. inserted tells a new row from an update (a freshly
-- inserted row version has no deleting transaction: xmax = 0).
INSERT INTO clusters (name, description, labels, task_queue, created_at, updated_at)
VALUES (@name, COALESCE(sqlc.narg(description)::text, ''), COALESCE(sqlc.narg(labels)::jsonb, '{}'), @task_queue, now(), now())
ON CONFLICT (name) DO UPDATE
SET description = COALESCE(sqlc.narg(description)::text, clusters.description),
    labels = COALESCE(sqlc.narg(labels)::jsonb, clusters.labels),
    task_queue = excluded.task_queue,
    updated_at = now()
RETURNING *, (xmax = 0)::boolean AS inserted;

-- name: ReportClusterCapacity :execrows
-- A report older than the stored one (a slow replica of the worker, a
-- retried write) is ignored, so last_seen_at never moves backwards.
UPDATE clusters
SET capacity = @capacity, last_seen_at = @seen_at::timestamptz
WHERE name = @name AND (last_seen_at IS NULL OR last_seen_at <= @seen_at::timestamptz);

-- name: ClusterExists :one
SELECT EXISTS (SELECT 1 FROM clusters WHERE name = @name)::boolean;

-- name: GetCluster :one
SELECT * FROM clusters
WHERE name = @name;

-- name: ListClusters :many
SELECT * FROM clusters
ORDER BY name;

-- name: DeleteCluster :execrows
DELETE FROM clusters
WHERE name = @name;
