-- name: AppendLog :execrows
-- Idempotent on (key, offset): a retried activity re-sending a chunk is a no-op.
INSERT INTO step_logs (run_id, step, item, attempt, "offset", data)
VALUES (sqlc.arg(run_id), sqlc.arg(step), sqlc.arg(item), sqlc.arg(attempt), sqlc.arg(byte_offset), sqlc.arg(data))
ON CONFLICT DO NOTHING;

-- name: ReadLog :many
-- Chunks that may overlap [from_offset, from_offset + max_bytes), by offset:
-- the last one starting at or before from_offset, and those starting inside.
SELECT s."offset", s.data FROM step_logs s
WHERE s.run_id = sqlc.arg(run_id) AND s.step = sqlc.arg(step) AND s.item = sqlc.arg(item) AND s.attempt = sqlc.arg(attempt)
  AND s."offset" >= COALESCE((
        SELECT max(p."offset") FROM step_logs p
        WHERE p.run_id = sqlc.arg(run_id) AND p.step = sqlc.arg(step) AND p.item = sqlc.arg(item)
          AND p.attempt = sqlc.arg(attempt) AND p."offset" <= sqlc.arg(from_offset)::bigint
      ), 0)
  AND s."offset" < sqlc.arg(from_offset)::bigint + sqlc.arg(max_bytes)::bigint
ORDER BY s."offset";

-- name: LogEnd :one
-- Where an attempt's stored log ends: the next byte's offset (0 when none).
SELECT COALESCE(max(s."offset" + octet_length(s.data)), 0)::bigint AS log_end FROM step_logs s
WHERE s.run_id = sqlc.arg(run_id) AND s.step = sqlc.arg(step) AND s.item = sqlc.arg(item) AND s.attempt = sqlc.arg(attempt);
