package activities

import (
	"context"

	"go.temporal.io/sdk/activity"
)

// SignalStepProgress is the signal a running step (local or Kubernetes)
// sends its workflow when what it waits for changes, e.g. the scheduler
// cannot place its pod or the machine's GPUs are taken: the run shows why
// the step is not running yet instead of silently waiting. It carries a
// StepProgress.
const SignalStepProgress = "atelier.step.progress"

// StepProgress says why an attempt is not running yet ("" once it is).
type StepProgress struct {
	Step    string `json:"step"`
	Item    *int   `json:"item,omitempty"`
	Attempt int    `json:"attempt"`
	// Message is e.g. "Unschedulable: pod x: 0/10 nodes are available:
	// 10 Insufficient nvidia.com/gpu."; "" clears it.
	Message string `json:"message"`
}

// SignalRun sends p to the workflow that runs the activity of ctx, as
// signal SignalStepProgress; outside an activity (or in a test activity
// environment, which has no client) it does nothing.
func SignalRun(ctx context.Context, p StepProgress) error {
	if !activity.IsActivity(ctx) {
		return nil
	}
	c := activity.GetClient(ctx)
	if c == nil {
		return nil
	}
	info := activity.GetInfo(ctx)
	return c.SignalWorkflow(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID, SignalStepProgress, p)
}
