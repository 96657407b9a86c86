-- Registry of Kubernetes clusters. No kubeconfig is stored: each cluster
-- has its own worker (holding its own credentials) that registers the
-- cluster here and reports its capacity; the pipeline's workflow picks a
-- cluster from this table and sends the step to that worker's task queue.

-- +goose Up
CREATE TABLE clusters (
    name         text        PRIMARY KEY,
    description  text        NOT NULL DEFAULT '',
    -- Flat string map matched by Placement.Selector.
    labels       jsonb       NOT NULL DEFAULT '{}',
    task_queue   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    -- Time of the worker's last capacity report; NULL until the first.
    last_seen_at timestamptz,
    -- catalog.ClusterCapacity as JSON: {gpus: {"<product>": {total, free}},
    -- cpuMillis: {total, free}, memoryBytes: {total, free}, nodes}.
    capacity     jsonb,
    -- Names become Temporal task queues and Kubernetes label values.
    CONSTRAINT clusters_name_check CHECK (name ~ '^[a-z][a-z0-9-]{0,62}$'),
    CONSTRAINT clusters_labels_check CHECK (jsonb_typeof(labels) = 'object'),
    CONSTRAINT clusters_capacity_check CHECK (capacity IS NULL OR jsonb_typeof(capacity) = 'object')
);

-- +goose Down
DROP TABLE clusters;
