// Package engine adapts the Temporal client to what the REST gateway needs:
// start a run idempotently, signal cancellation, query live status, build
// links to the Temporal UI, and check health.
//
// A run is exactly one workflow execution whose workflow ID is the run ID, so
// every operation here is addressed by run ID alone and a retried start can
// never create a second execution.
package engine
