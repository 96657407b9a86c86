-- Project secrets: write-only named values steps reference by name. Only
-- their sealed form is stored (internal/platform/secretbox: the value
-- encrypted with its own data key, the data key encrypted with the
-- installation's key, named by key_id): a dump of the catalogue holds no
-- value in clear. secret_events is the audit of who changed what.

-- +goose Up
CREATE TABLE project_secrets (
    project     text        NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    name        text        NOT NULL,
    key_id      text        NOT NULL,
    data_key    bytea       NOT NULL,
    nonce       bytea       NOT NULL,
    ciphertext  bytea       NOT NULL,
    -- 1 when created, +1 on every replacement.
    version     integer     NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  text        NOT NULL DEFAULT '',
    PRIMARY KEY (project, name)
);

CREATE TABLE secret_events (
    id      bigserial   PRIMARY KEY,
    project text        NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    name    text        NOT NULL,
    -- created, replaced, deleted, rewrapped (key rotation)
    action  text        NOT NULL,
    actor   text        NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX secret_events_project_idx ON secret_events (project, id DESC);

-- +goose Down
DROP TABLE secret_events;
DROP TABLE project_secrets;
