// Package outbox holds what the gateway's outbox dispatchers share
// (internal/services/webhooks, internal/services/triggers): the loop that
// polls a Postgres outbox for due rows, claiming batches under leases, and
// goes on at once while batches come back full.
package outbox
