// Package deploy runs inference pipeline steps
// (activities.DeployEndpointName): an attempt creates the run's endpoint,
// or sends its existing endpoint the step's spec, and waits until the
// revision that results is promoted.
//
// It is a client of the endpoint's entity workflow
// (endpoint.Workflow, through client/endpointclient), never of
// the runtime that serves it: the endpoint's workflow alone writes its
// replicas and traffic, so the step only asks for a spec and reads the
// status query every two seconds. The local worker registers it on its
// step queue, beside container steps: an attempt waits as long as a
// rollout lasts (canary pauses are minutes), which would starve the short
// bookkeeping activities of the control queue.
//
// # Outcomes
//
// The revision the attempt waits for is the one the update answered (1
// for a new endpoint; the latest when the spec equals it, since an equal
// spec makes no revision). It has succeeded once the stable revision runs
// what it runs (the same template digest: its own rollout was promoted, or
// it changed only replicas, autoscaling or rollout settings and applied in
// place), or once the endpoint's events say its rollout was promoted. It
// has failed when its rollout was rolled back (the message of the
// RolloutRolledBack or RolloutRollBack event: the failing gate, the
// runtime's refusal or an abort), when the endpoint is deleted, or when
// the spec is refused: an invalid spec (every problem, under "spec."),
// a cluster that is not registered, or a change of what replicas run while
// another rollout is in progress. Only the last is worth retrying (by the
// step's retries, once that rollout is over); the others are
// non-retryable.
//
// # Retries and crashes
//
// Each poll heartbeats the revision and the attempt's start. An execution
// that resumes after a lost worker waits for the revision in the
// heartbeat; one whose heartbeat was lost sends the same spec again, which
// changes nothing when the revision it made is still the latest. The
// attempt's timeout counts from its first execution.
//
// # Cancellation
//
// A cancelled run stops waiting and leaves the rollout running: the
// endpoint belongs to the project, not to the run (it outlives it, and
// may serve other runs' revisions), and its own gates still roll a bad
// revision back. Abort it through the endpoint's API
// (POST /v1/projects/{p}/endpoints/{e}/abort) to stop it.
package deploy
