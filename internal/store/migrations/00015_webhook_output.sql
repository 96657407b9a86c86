-- A webhook opts in to the step output that errors quote (the last lines
-- a failed step printed): whatever a step prints is its own data, and a
-- webhook's receiver is outside the platform, so deliveries leave it out
-- unless include_output is set (issue 24).

-- +goose Up
ALTER TABLE webhooks ADD COLUMN include_output boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE webhooks DROP COLUMN include_output;
