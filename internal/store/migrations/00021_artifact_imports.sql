-- What a URI input last imported (issue 23), per project: the source's
-- fingerprint when it was read (an S3 object's ETag, size and time; a
-- prefix's listing's sha256; an HTTP answer's strong ETag) and the stored
-- object it became. An import whose source still has that fingerprint,
-- and whose bytes are still stored, reads nothing (activities/imports):
-- a cached step over an unchanged 1 GiB dataset moves no byte.

-- +goose Up
CREATE TABLE artifact_imports (
    project     text        NOT NULL,
    uri         text        NOT NULL,
    fingerprint text        NOT NULL,
    digest      text        NOT NULL,
    size        bigint      NOT NULL,
    files       integer     NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project, uri)
);

-- +goose Down
DROP TABLE artifact_imports;
