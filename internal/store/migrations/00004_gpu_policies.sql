-- GPU admission policy per project (gpu.ProjectPolicy): its cohort, fair
-- share weight, priority range and quotas. One row per project, written
-- whole (the admin API replaces a policy at once), so the quotas are a
-- JSON array rather than rows that could be half-updated.

-- +goose Up
CREATE TABLE gpu_policies (
    project          text             PRIMARY KEY REFERENCES projects (name) ON DELETE CASCADE,
    cohort           text             NOT NULL DEFAULT '',
    weight           double precision NOT NULL DEFAULT 1,
    default_priority integer          NOT NULL DEFAULT 0,
    min_priority     integer          NOT NULL DEFAULT 0,
    max_priority     integer          NOT NULL DEFAULT 0,
    -- [{resource, nominal, borrowingLimit, lendingLimit}], validated by
    -- gpu.ProjectPolicy.Problems before it is stored.
    quotas           jsonb            NOT NULL DEFAULT '[]',
    updated_at       timestamptz      NOT NULL DEFAULT now(),
    CONSTRAINT gpu_policies_quotas_check CHECK (jsonb_typeof(quotas) = 'array'),
    CONSTRAINT gpu_policies_priority_check CHECK (min_priority <= default_priority AND default_priority <= max_priority)
);

-- +goose Down
DROP TABLE gpu_policies;
