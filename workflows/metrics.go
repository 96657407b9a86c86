package workflows

import (
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/runstate"
)

// Run and step metrics (families in internal/platform/telemetry). They go through
// workflow.GetMetricsHandler, which emits nothing while the workflow
// replays, so each is counted once per event however often the history is
// replayed; they add no command, so histories replay unchanged. The
// worker's handler keeps only each family's labels: kind and state (and
// project with --metrics-tenant-labels), never run IDs or pipelines.

// runKind is the kind label of a run: "pipeline" for declarative runs,
// "workflow" for native Go pipelines (as atelier_runs_started_total).
func runKind(ctx workflow.Context) string {
	if workflow.GetInfo(ctx).WorkflowType.Name == runstate.PipelineWorkflowName {
		return "pipeline"
	}
	return "workflow"
}

func (r *Run) metrics(tags map[string]string) client.MetricsHandler {
	tags["project"] = r.status.Project
	return workflow.GetMetricsHandler(r.root).WithTags(tags)
}

func (r *Run) countBegun() {
	r.metrics(map[string]string{"kind": runKind(r.root)}).Counter(telemetry.MetricRunsBegun).Inc(1)
}

func (r *Run) countFinished() {
	h := r.metrics(map[string]string{"kind": runKind(r.root), "state": string(r.status.State)})
	h.Counter(telemetry.MetricRunsFinished).Inc(1)
	if r.status.StartedAt != nil && r.status.FinishedAt != nil {
		h.Timer(telemetry.MetricRunDuration).Record(r.status.FinishedAt.Sub(*r.status.StartedAt))
	}
}

// countStepStarted counts a step (or forEach item) the first time it
// starts: a step requeued after a GPU preemption is not started again.
func (r *Run) countStepStarted(st *runstate.StepStatus) {
	r.metrics(map[string]string{"kind": st.Kind}).Counter(telemetry.MetricStepsStarted).Inc(1)
}

// countStepEnded counts a step reaching a final state. A forEach step is
// not counted itself (its items are).
func (r *Run) countStepEnded(st *runstate.StepStatus) {
	if st.Items != nil {
		return
	}
	h := r.metrics(map[string]string{"kind": st.Kind, "state": string(st.State)})
	h.Counter(telemetry.MetricStepsFinished).Inc(1)
	if st.StartedAt != nil && st.FinishedAt != nil {
		h.Timer(telemetry.MetricStepDuration).Record(st.FinishedAt.Sub(*st.StartedAt))
	}
}

func (r *Run) countAttemptStarted(st *runstate.StepStatus) {
	r.metrics(map[string]string{"kind": st.Kind}).Counter(telemetry.MetricStepAttemptsStarted).Inc(1)
}

// countAttemptEnded counts an attempt's outcome and, when the attempt
// reported when it started on its worker, how long it waited since it was
// due. Clocks of the worker and of the workflow may differ a little: a
// negative wait is 0.
func (r *Run) countAttemptEnded(st *runstate.StepStatus, a *runstate.Attempt, due, startedOnWorker time.Time) {
	h := r.metrics(map[string]string{"kind": st.Kind, "state": string(a.State)})
	h.Counter(telemetry.MetricStepAttemptsFinished).Inc(1)
	if !startedOnWorker.IsZero() {
		r.metrics(map[string]string{"kind": st.Kind}).Timer(telemetry.MetricStepQueueWait).Record(max(startedOnWorker.Sub(due), 0))
	}
}
