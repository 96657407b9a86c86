// Package admission is the GPU admission workflow: one long-running
// Temporal workflow per cluster (admission.Workflow, registered as
// activities.AdmissionWorkflowName) owns the cluster's GPU queue. Pipeline
// runs submit their GPU steps to it through an activity
// (activities.SubmitWorkloadName does a signal-with-start), it decides with
// the pure scheduler of package gpu on every change and answers each run by
// signal, so a waiting step holds no pod; its "queue" query says why each
// workload waits. It continues as new past HistoryLimit events, carrying
// its queue.
//
// Its messages (requests, grants, preemptions, the queue) are in package
// activities, shared with the submit activity and the gateway. Code here
// must stay deterministic; `make lint` runs workflowcheck over it.
package admission
