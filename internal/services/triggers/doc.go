// Package triggers starts the runs of a project's triggers (REST
// /v1/projects/{p}/triggers): a pipeline started when a run of another
// finished (kind run) or when a signed request reached the trigger's
// inbound URL (kind hook).
//
// Firings are queued where the event is stored: a run's, by the statement
// that mirrors its final status (store.MirrorRun, the same one that queues
// webhook deliveries), one per trigger and upstream run whatever retries,
// restarts or reconciler sweeps write that status again; a hook's, by the
// gateway that verified the request, one per delivery ID. The Dispatcher
// runs in every gateway, like the webhook dispatcher: it leases due
// firings (SKIP LOCKED, with an expiry), renders the trigger's params over
// the firing (template.go), and starts the run through the catalogue and
// the engine with the firing's ID as its idempotency key, so a firing
// whose gateway died mid-start, or whose start was not confirmed, starts
// the same run on its next attempt and never a second one: exactly once
// per upstream run (the complaint of kubeflow/pipelines#12834).
//
// A firing whose params do not render or do not fit the pipeline, or
// whose pipeline is gone, fails for good with the reason in the trigger's
// firing log; an engine that is down is retried with backoff. A trigger
// starts at most its maxPerMinute runs per minute (the claim leaves the
// rest waiting), so a cycle of triggers or a flood of requests slows down
// instead of flooding the engine; a trigger on its own pipeline is refused
// when created.
package triggers
