// Package reconcile keeps the catalogue's runs converged with Temporal.
//
// A run's workflow writes its own state to Postgres (the mirror activity),
// so the catalogue is right as long as the workflow reaches its end. It
// does not when the workflow is ended from outside (`temporal workflow
// terminate`, tctl, the UI, a workflow timeout, a reset), nor when the row
// has no workflow at all (the workflow never started, or lives in another
// Temporal). Without help such a run shows PENDING or RUNNING forever.
//
// A Reconciler fixes one run on demand (the gateway calls Converge when a
// run's status query is refused because its workflow is closed, so GET and
// SSE converge at once) and sweeps in the background (Run): every few
// seconds it asks Temporal's visibility for workflows closed while their
// AtelierState search attribute still says in flight, and every minute it
// checks catalogue rows that have not changed for a while. Every write goes
// through the store's seq rule (a newer write of the workflow's own always
// wins), so several gateways may run it at once without coordination.
package reconcile
