// Package telemetry is where Atelier's Prometheus metrics are declared and
// exported: one catalogue of every metric family Atelier itself emits
// (Families: name, type, help, labels, buckets), a process registry
// (NewRegistry), and a Temporal SDK metrics handler over that registry
// (NewSDKHandler), so the SDK's own metrics (temporal_workflow_task_…,
// temporal_activity_…, temporal_request_…) and the metrics Atelier emits from
// workflow code are served on the same /metrics as the gateway's.
//
// Why a handler of our own rather than the SDK's tally contrib: it is ~200
// lines over the Prometheus client Atelier already uses, instead of tally,
// its Prometheus reporter and their dependencies, and it knows the catalogue
// (help texts, buckets, bounded label sets) of the metrics workflows emit.
//
// Workflow code emits through workflow.GetMetricsHandler(ctx), which drops
// everything emitted while the workflow replays: a run's counters move once
// per event, not once per replay (a worker restart, a sticky-cache eviction).
//
// Labels stay bounded: kind, state, cluster and the like, never run IDs,
// pipeline names or (by default) projects, whose number grows with use and
// would make every series explode. WithTenantLabels adds project (and, on
// the gateway's endpoint proxy, endpoint and revision) where an operator
// has few enough tenants to afford them.
package telemetry
