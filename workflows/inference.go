package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Inference starts an inference step: it creates the endpoint s names in
// the run's project (on s.Cluster, "" = the local runtime) or sends the
// existing one s.Spec, then waits until the revision that results is
// promoted. Its outputs are {"endpoint": name, "revision": N}. A rollback
// fails the step with the failing gate's message and is never retried
// (the same spec would meet the same revision); WithTimeout bounds the
// wait, not the rollout. Cancelling the run stops the wait and leaves the
// rollout going (see package activities/deploy). WithPlacement does not
// apply: the endpoint runs where s.Cluster says.
func (r *Run) Inference(ctx workflow.Context, name string, s pipeline.InferenceStep, opts ...StepOption) StepFuture {
	return r.kubeStepFuture(ctx, name, pipeline.KindInference, stepWork{inference: &s}, opts)
}

// runInference runs every attempt of an inference step (or forEach item)
// as the deploy activity, on the workflow's own queue: the local worker
// that polls it holds the Temporal client the activity needs, and its step
// slots, not its short control slots, are for waits that last a rollout.
func (r *Run) runInference(ctx workflow.Context, st *runstate.StepStatus, stepName string, item *int, s pipeline.InferenceStep, cfg stepConfig) (Outputs, error) {
	actx := stepActivityOptions(ctx, cfg.timeout, "")
	return r.runAttempts(ctx, st, cfg, func(_ workflow.Context, attempt int) (attemptOutcome, error) {
		req := activities.DeployEndpointRequest{
			Project: r.status.Project, RunID: r.status.RunID, Step: stepName, Item: item, Attempt: attempt,
			Endpoint: s.Endpoint, Cluster: s.Cluster, Spec: s.Spec, Timeout: cfg.timeout,
		}
		var res activities.DeployEndpointResult
		actx := withAttemptSummary(actx, stepName, item, attempt)
		err := workflow.ExecuteActivity(actx, activities.DeployEndpointName, req).Get(actx, &res)
		out := attemptOutcome{Cluster: res.Cluster, Object: "endpoint/" + s.Endpoint}
		out.StartedAt, out.FinishedAt = res.StartedAt, res.FinishedAt
		if err == nil {
			out.Outputs = inferenceOutputs(res)
		}
		return out, err
	})
}

// inferenceOutputs are an inference step's outputs, typed as every step's
// outputs are (JSON-decoded: numbers are float64), so that Go pipelines
// read them alike whatever the step's kind.
func inferenceOutputs(res activities.DeployEndpointResult) map[string]any {
	return map[string]any{"endpoint": res.Endpoint, "revision": float64(res.Revision)}
}
