package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
)

// Application error types of a pipeline step's attempt (the step fails at
// once with them: retrying the same child would meet the same end).
const (
	// ErrTypeChildRunCancelled: the child run was cancelled by someone
	// other than its parent (its own REST cancel, Temporal).
	ErrTypeChildRunCancelled = "ChildRunCancelled"
	// ErrTypePipelineTooDeep: starting the child would nest runs deeper
	// than spec.MaxPipelineDepth.
	ErrTypePipelineTooDeep = "PipelineTooDeep"
)

// Pipeline starts a pipeline step in a native Go pipeline: it runs the
// stored pipeline c names, of the run's project, as a child run, and its
// outputs are the child pipeline's outputs. See spec.PipelineStep; c's
// params are taken as they are (no templates). WithTimeout bounds each
// child run and WithRetries starts a new child run per failed attempt;
// WithPlacement does not apply.
func (r *Run) Pipeline(ctx workflow.Context, name string, c pipeline.ChildStep, opts ...StepOption) StepFuture {
	return r.kubeStepFuture(ctx, name, pipeline.KindPipeline, stepWork{pipeline: &c}, opts)
}

// runChild runs every attempt of a pipeline step (or forEach item): each
// resolves the pipeline's version (an activity on the control queue, so
// "the newest" is decided now and recorded in history), checks the params
// against it, and runs it as a child workflow whose ID derives from this
// run, the step, the item and the attempt.
func (r *Run) runChild(ctx workflow.Context, st *runstate.StepStatus, stepName string, item *int, c pipeline.ChildStep, cfg stepConfig) (Outputs, error) {
	return r.runAttempts(ctx, st, cfg, func(actx workflow.Context, attempt int) (attemptOutcome, error) {
		var out attemptOutcome
		out.StartedAt = workflow.Now(actx)
		parentStep := stepName
		if item != nil {
			parentStep = fmt.Sprintf("%s[%d]", stepName, *item)
		}
		depth, chain := 1, []string{r.pipelineName()}
		if r.parent != nil {
			depth = r.parent.Depth + 1
			chain = append(append([]string(nil), r.parent.Pipelines...), chain...)
		}
		if depth > pipeline.MaxPipelineDepth {
			return out, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"pipeline %q would run %d levels below the run a user started; child runs nest at most %d levels (%s → %s): do these pipelines run each other in a cycle?",
				c.Name, depth, pipeline.MaxPipelineDepth, strings.Join(chain, " → "), c.Name), ErrTypePipelineTooDeep, nil)
		}

		var res activities.ResolvePipelineResult
		rctx := r.controlActivity(actx, activities.ErrTypePipelineNotFound)
		if err := workflow.ExecuteActivity(rctx, activities.ResolvePipelineName, activities.ResolvePipelineRequest{
			Project: r.status.Project, Pipeline: c.Name, Version: c.Version,
		}).Get(rctx, &res); err != nil {
			return out, err
		}
		params, err := pipeline.ResolveParams(&res.Spec, c.Params)
		if err != nil {
			return out, temporal.NewNonRetryableApplicationError(fmt.Sprintf("params of pipeline %q version %d: %v", c.Name, res.Version, err), activities.ErrTypeInvalidStep, nil)
		}

		id := childRunID(r.status.RunID, stepName, item, attempt)
		notAfter := out.StartedAt.Add(cfg.timeout)
		if !r.deadlineAt.IsZero() && r.deadlineAt.Before(notAfter) {
			notAfter = r.deadlineAt
		}
		in := PipelineInput{
			RunID: id, Project: r.status.Project, Pipeline: c.Name, Version: res.Version, Spec: res.Spec,
			Params: params, GPUPriority: r.gpuPrio,
			Parent: &ParentRun{RunID: r.status.RunID, Step: parentStep, Depth: depth, Pipelines: chain, NotAfter: &notAfter},
		}
		a := &st.Attempts[len(st.Attempts)-1]
		a.ChildRun = &runstate.ChildRun{RunID: id, Pipeline: c.Name, Version: res.Version}
		r.touch()

		result, err := r.awaitChild(actx, in)
		out.FinishedAt = workflow.Now(actx)
		if err != nil {
			return out, err
		}
		out.Outputs = result.Outputs
		if out.Outputs == nil {
			out.Outputs = map[string]any{}
		}
		// The child's exported artifacts become the step's (the same
		// references: the child's steps remain their producers), which
		// the run's steps read with from: "<step>.<name>". Data only:
		// no command.
		out.Artifacts = result.Artifacts
		return out, nil
	})
}

// awaitChild starts the child run and waits for its end. The child runs
// under a context disconnected from ctx: when ctx is cancelled (the run
// is cancelled, through REST or Temporal, or its deadline passed), the
// child gets the cancel signal with the parent's reason, runs its cleanup
// and ends CANCELLED, and only then does this return. If the parent ends
// without that (terminated), Temporal cancels the child
// (PARENT_CLOSE_POLICY_REQUEST_CANCEL), which takes the same path.
func (r *Run) awaitChild(ctx workflow.Context, in PipelineInput) (PipelineResult, error) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	cctx := workflow.WithChildOptions(dctx, workflow.ChildWorkflowOptions{
		WorkflowID: in.RunID,
		TaskQueue:  r.taskQueue,
		// A run ID is never reused: the catalogue keys runs by it.
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
		WaitForCancellation:   true,
		// What the gateway sets on the runs it starts (runclient), so the
		// child is found and shown like any run.
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(runstate.SAProject).ValueSet(in.Project),
			temporal.NewSearchAttributeKeyKeyword(runstate.SAPipeline).ValueSet(in.Pipeline),
			temporal.NewSearchAttributeKeyKeyword(runstate.SAState).ValueSet(string(runstate.Pending)),
		),
		Memo:          map[string]any{"project": in.Project, "workflow": runstate.PipelineWorkflowName, "pipeline": in.Pipeline},
		StaticSummary: fmt.Sprintf("%s v%d · child of %s, step %s", in.Pipeline, in.Version, in.Parent.RunID, in.Parent.Step),
	})
	fut := workflow.ExecuteChildWorkflow(cctx, runstate.PipelineWorkflowName, in)

	var res PipelineResult
	done, signalled := false, false
	for !done {
		sel := workflow.NewSelector(dctx)
		sel.AddFuture(fut, func(workflow.Future) { done = true })
		if !signalled {
			sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {})
		}
		sel.Select(dctx)
		if done || signalled || ctx.Err() == nil {
			continue
		}
		signalled = true
		// The child must have started before it can be signalled.
		if err := fut.GetChildWorkflowExecution().Get(dctx, nil); err != nil {
			break // it never started; fut holds why
		}
		req := r.childCancelRequest()
		if err := workflow.SignalExternalWorkflow(dctx, in.RunID, "", runstate.SignalCancel, req).Get(dctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("could not signal the child run to cancel; it ends with its parent", "child", in.RunID, "error", err)
		}
	}
	err := fut.Get(dctx, &res)
	if err == nil {
		return res, nil
	}
	return res, childError(ctx, in.RunID, err)
}

// childCancelRequest is the cancel signal a child run gets when its
// parent stops: the parent's reason and requester, or its deadline.
func (r *Run) childCancelRequest() runstate.CancelRequest {
	now := workflow.Now(r.root)
	if c := r.status.Cancel; c != nil {
		return runstate.CancelRequest{Reason: fmt.Sprintf("parent run %s cancelled: %s", r.status.RunID, c.Reason), Requester: c.Requester, At: now}
	}
	why := r.status.Error
	if why == "" {
		why = "stopped"
	}
	return runstate.CancelRequest{Reason: fmt.Sprintf("parent run %s: %s", r.status.RunID, why), Requester: "atelier", At: now}
}

// childError turns a child run's end into an attempt error: cancelled
// because its parent stopped (the attempt loop sees ctx cancelled), or
// otherwise a step failure with the child's own message.
func childError(ctx workflow.Context, id string, err error) error {
	if ctx.Err() != nil {
		return err
	}
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("child run %s was cancelled", id), ErrTypeChildRunCancelled, nil)
	}
	var already *temporal.ChildWorkflowExecutionAlreadyStartedError
	if errors.As(err, &already) {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("child run %s already exists (a reset of this run?); it is not started twice", id), activities.ErrTypeInvalidStep, nil)
	}
	var terminated *temporal.TerminatedError
	if errors.As(err, &terminated) {
		return temporal.NewApplicationError(fmt.Sprintf("child run %s was terminated through Temporal", id), activities.ErrTypeStepFailed)
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return temporal.NewApplicationError(fmt.Sprintf("child run %s timed out in Temporal", id), activities.ErrTypeStepFailed)
	}
	msg := err.Error()
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		msg = app.Message()
	}
	return temporal.NewApplicationError(fmt.Sprintf("child run %s failed: %s", id, msg), activities.ErrTypeStepFailed)
}

// maxRunIDLen keeps child run IDs inside the REST API's run ID pattern
// (255 characters) with room to spare.
const maxRunIDLen = 200

// childRunID is the ID of the child run of a pipeline step's attempt:
// "<run>.<step>.a<attempt>", or "<run>.<step>.i<item>.a<attempt>" for a
// forEach item. Deterministic, so a replayed or retried workflow task
// names the same child; distinct per attempt, because the catalogue keys
// runs by ID. Step names hold no '.', so IDs never collide. When nesting
// makes it too long, the parent part is shortened to its first 36
// characters (the top run's UUID) and a hash of the whole.
func childRunID(parent, step string, item *int, attempt int) string {
	tail := step
	if item != nil {
		tail += fmt.Sprintf(".i%d", *item)
	}
	tail += fmt.Sprintf(".a%d", attempt)
	id := parent + "." + tail
	if len(id) <= maxRunIDLen {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return parent[:min(len(parent), 36)] + "." + hex.EncodeToString(sum[:8]) + "." + tail
}

// pipelineName is the run's pipeline, or its workflow type for a Go
// pipeline.
func (r *Run) pipelineName() string {
	if r.status.Pipeline != "" {
		return r.status.Pipeline
	}
	return r.status.Workflow
}
