-- name: PutGPUPolicy :one
INSERT INTO gpu_policies (project, cohort, weight, default_priority, min_priority, max_priority, quotas, updated_at)
VALUES (@project, @cohort, @weight, @default_priority, @min_priority, @max_priority, @quotas, now())
ON CONFLICT (project) DO UPDATE
SET cohort = excluded.cohort,
    weight = excluded.weight,
    default_priority = excluded.default_priority,
    min_priority = excluded.min_priority,
    max_priority = excluded.max_priority,
    quotas = excluded.quotas,
    updated_at = now()
RETURNING *;

-- name: GetGPUPolicy :one
SELECT * FROM gpu_policies
WHERE project = @project;

-- name: ListGPUPolicies :many
SELECT * FROM gpu_policies
ORDER BY project;

-- name: DeleteGPUPolicy :execrows
DELETE FROM gpu_policies
WHERE project = @project;
