// Package webhooks delivers run events to the webhooks projects register
// (REST /v1/projects/{p}/webhooks): run.finished, step.failed and
// approval.requested.
//
// Events are queued where run states already reach Postgres: the statement
// that mirrors a run's status (store.MirrorRun, called by the mirror
// activity and by the reconciler) also inserts one outbox row per
// subscribed webhook and event (catalog.RunEvents derives the events from
// the status), so an event is queued exactly when the status showing it
// is stored, and a project without webhooks pays one index probe on the
// writes that show an event, no extra round trip. The workflow mirrors a
// step failure and an approval request at once (workflows.Run.notice),
// not only run-level state changes.
//
// The Dispatcher runs in every gateway (like the reconciler): it polls the
// outbox for due deliveries, leases a batch (FOR UPDATE SKIP LOCKED, with
// an expiry, so several gateways never send one delivery at once and a
// gateway that dies mid-attempt only delays it), POSTs each payload with
// an HMAC-SHA256 signature (Sign), and records every attempt; failures
// retry with exponential backoff up to a maximum number of attempts.
// Delivery is at least once: a receiver deduplicates on the event ID.
//
// Server-side request forgery: a webhook URL is the one place where a
// tenant makes the gateway send requests where it likes. Only http and
// https URLs are accepted, redirects are not followed, proxies from the
// environment are not used, and, unless AllowPrivate is set (the dev
// stack sets it), the address each request connects to is checked when
// it connects (not only when the URL is stored, so DNS cannot rebind it):
// loopback, private, link-local (cloud metadata services), CGNAT,
// multicast and unspecified addresses are refused.
package webhooks
