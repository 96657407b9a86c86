// Package retention deletes finished runs older than a configured age,
// with their step logs, so that the catalogue does not grow without bound.
//
// The gateway runs a Sweeper next to the reconciler (--retention, off by
// default). Every Interval it deletes finished runs (SUCCEEDED, FAILED,
// CANCELLED, TERMINATED) whose row was last written more than MaxAge ago,
// in batches of BatchSize runs: each batch is one short transaction
// (store.DeleteFinishedRuns) that locks only the rows it deletes, with a
// Pause between batches so a large backlog never monopolises the database.
// Runs still in flight are never deleted, however old. Several gateways may
// sweep at once: their batches are disjoint (SKIP LOCKED).
//
// Only the catalogue is trimmed: a run's history in Temporal follows the
// namespace's own retention period (`temporal operator namespace update
// --retention`), and step working directories on workers are not touched.
package retention
