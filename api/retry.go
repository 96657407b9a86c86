package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

var (
	ptRunNotFinished = problemType{"run-not-finished", "Run still running", http.StatusConflict}
	ptNotRetryable   = problemType{"not-retryable", "Run cannot be retried", http.StatusConflict}
)

// RetryRun starts a new run of a finished run's pipeline and input,
// carrying the outputs of what succeeded so that only the rest runs: a
// declarative run's version and params with runstate.Reuse in its input,
// a native Go run's workflow and input with the plan in the start's memo
// (runstate.MemoReuse), as its input is the pipeline author's own type.
func (s *server) RetryRun(ctx context.Context, req gen.RetryRunRequestObject) (gen.RetryRunResponseObject, error) {
	orig, err := s.getRun(ctx, req.Project, req.Run)
	if err != nil {
		return nil, err
	}
	st := s.liveStatus(ctx, orig)
	if !st.State.Terminal() {
		return nil, newProblem(ptRunNotFinished, "run %s is %s: retry it once it has ended (or cancel it first)", orig.ID, st.State)
	}
	if st.ParentRun != "" {
		// A retry of its own would be a run its parent never sees.
		return nil, newProblem(ptNotRetryable, "run %s is a child run of run %s (step %s): retry the parent run, which reuses what succeeded and runs this step as a new child run", orig.ID, st.ParentRun, st.ParentStep)
	}
	if slices.ContainsFunc(st.Warnings, func(w string) bool { return strings.Contains(w, workflows.OutputsOmittedWarning) }) {
		// Reusing would hand later steps missing outputs.
		return nil, newProblem(ptNotRetryable, "run %s kept only part of its steps' outputs (its status would exceed Temporal's payload limit), so they cannot be reused; start a new run", orig.ID)
	}
	input, err := s.startInput(ctx, orig, st.ScheduleID != "")
	if err != nil {
		return nil, err
	}
	resumeFrom := deref(deref(req.Body).ResumeFrom)
	id := s.newID()
	var row catalog.Run
	var start runclient.StartRequest
	if orig.Workflow == runstate.PipelineWorkflowName {
		row, start, err = retryPipelineRun(orig, st, input, resumeFrom, id, s.taskQueue)
	} else {
		row, start, err = s.retryGoRun(ctx, orig, st, input, resumeFrom, id)
	}
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	row.CreatedAt, row.UpdatedAt, row.CreatedBy = now, now, principal(ctx).Name
	start.CreatedBy = row.CreatedBy
	run, _, err := s.cat.CreateRun(ctx, row)
	if err != nil {
		return nil, internalError(err)
	}
	if err := s.startOrUndo(ctx, run, start); err != nil {
		return nil, err
	}
	s.metrics.runsStarted.WithLabelValues("retry").Inc()
	return gen.RetryRun201JSONResponse{
		Body:    s.runView(run, nil),
		Headers: gen.RetryRun201ResponseHeaders{Location: s.runPath(run)},
	}, nil
}

// startInput is the input a run was started with: its row's, or, for a
// run the gateway did not start (a schedule's, or one started through the
// Temporal SDK: the workflow's mirror wrote its row, without the input),
// the one Temporal recorded in the run's first history event.
func (s *server) startInput(ctx context.Context, run catalog.Run, scheduled bool) (json.RawMessage, error) {
	if in := bytes.TrimSpace(run.Input); len(in) > 0 {
		return json.RawMessage(in), nil
	}
	if run.CreatedBy != "" && !scheduled {
		// Only the gateway's rows and scheduled runs name who started
		// the run: this Go run was started by the gateway without input.
		return nil, nil
	}
	in, err := s.eng.StartInput(ctx, run.ID)
	switch {
	case errors.Is(err, runclient.ErrRunNotFound):
		return nil, newProblem(ptNotRetryable, "run %s was not started through this API (a schedule or the Temporal SDK started it), so only its Temporal history holds its input, and Temporal no longer has it (past the namespace's retention); start a new run", run.ID)
	case err != nil:
		return nil, newProblem(ptUnavailable, "cannot read the input of run %s from Temporal; retry later", run.ID).withHeader("Retry-After", retryAfterSeconds).withCause(err)
	}
	return in, nil
}

// retryPipelineRun plans the retry of a declarative run: the same spec,
// version and params, with what it reuses in its input.
func retryPipelineRun(orig catalog.Run, st runstate.Status, input json.RawMessage, resumeFrom []string, id, taskQueue string) (catalog.Run, runclient.StartRequest, error) {
	var in workflows.PipelineInput
	if err := json.Unmarshal(input, &in); err != nil {
		return catalog.Run{}, runclient.StartRequest{}, internalError(fmt.Errorf("decode the input of run %s: %w", orig.ID, err))
	}
	reuse, fields := planReuse(orig.ID, &in.Spec, st, resumeFrom)
	if len(fields) > 0 {
		return catalog.Run{}, runclient.StartRequest{}, newProblem(ptInvalid, "%s", summarize(fields)).withErrors(fields)
	}
	in.RunID, in.Reuse = id, reuse
	b, err := json.Marshal(in)
	if err != nil {
		return catalog.Run{}, runclient.StartRequest{}, internalError(err)
	}
	row := catalog.Run{
		ID: id, Project: orig.Project, Pipeline: orig.Pipeline, Version: orig.Version,
		Workflow: runstate.PipelineWorkflowName, State: runstate.Pending, Input: b,
	}
	start := runclient.StartRequest{
		RunID: id, Workflow: runstate.PipelineWorkflowName, TaskQueue: taskQueue,
		Input: json.RawMessage(b), Project: orig.Project, Pipeline: orig.Pipeline,
	}
	return row, start, nil
}

// retryGoRun plans the retry of a native Go run: the same workflow and
// input, on the queue of the workers that register it now, with what it
// reuses (workflows.PlanGoRetry) in the start's memo.
func (s *server) retryGoRun(ctx context.Context, orig catalog.Run, st runstate.Status, input json.RawMessage, resumeFrom []string, id string) (catalog.Run, runclient.StartRequest, error) {
	wf, err := s.cat.GetGoWorkflow(ctx, orig.Workflow)
	if errors.Is(err, catalog.ErrNotFound) {
		return catalog.Run{}, runclient.StartRequest{}, newProblem(ptNotRetryable, "no worker registers workflow %q any more, so run %s cannot run again", orig.Workflow, orig.ID)
	}
	if err != nil {
		return catalog.Run{}, runclient.StartRequest{}, internalError(err)
	}
	reuse, problems := workflows.PlanGoRetry(orig.ID, st, resumeFrom)
	if len(problems) > 0 {
		fields := make([]gen.FieldError, len(problems))
		for i, p := range problems {
			fields[i] = gen.FieldError{Path: fmt.Sprintf("resumeFrom[%d]", p.Index), Message: p.Message}
		}
		return catalog.Run{}, runclient.StartRequest{}, newProblem(ptInvalid, "%s", summarize(fields)).withErrors(fields)
	}
	row := catalog.Run{ID: id, Project: orig.Project, Workflow: orig.Workflow, State: runstate.Pending}
	start := runclient.StartRequest{RunID: id, Workflow: orig.Workflow, TaskQueue: wf.TaskQueue, Project: orig.Project, Reuse: reuse}
	if len(input) > 0 && !bytes.Equal(input, []byte("null")) {
		row.Input, start.Input = input, input
	}
	return row, start, nil
}

// planReuse decides what a retry takes from the run it retries: every step
// that succeeded (or was itself reused), unless it is in resumeFrom or
// downstream of one; and, of a forEach step that did not succeed, the
// items that did.
func planReuse(origID string, p *pipeline.Spec, st runstate.Status, resumeFrom []string) (*runstate.Reuse, []gen.FieldError) {
	index := map[string]int{}
	for i, step := range p.Steps {
		index[step.Name] = i
	}
	rerun := make([]bool, len(p.Steps))
	var fields []gen.FieldError
	for k, name := range resumeFrom {
		i, ok := index[name]
		if !ok {
			fields = append(fields, gen.FieldError{Path: fmt.Sprintf("resumeFrom[%d]", k), Message: fmt.Sprintf("no step %q in the pipeline", name)})
			continue
		}
		rerun[i] = true
	}
	// Downstream of a step that runs again runs again: its inputs may
	// change. Dependencies point upstream; sweep until nothing changes.
	deps := pipeline.Dependencies(p)
	for changed := true; changed; {
		changed = false
		for j := range p.Steps {
			if !rerun[j] && slices.ContainsFunc(deps[j], func(i int) bool { return rerun[i] }) {
				rerun[j], changed = true, true
			}
		}
	}
	reuse := &runstate.Reuse{RetryOf: origID}
	for _, ss := range st.Steps {
		i, ok := index[ss.Name]
		if !ok || rerun[i] {
			continue
		}
		switch {
		case ss.Wide != nil && (ss.State == runstate.StepSucceeded || ss.State == runstate.StepCached) && ss.Wide.Outputs != nil:
			// A wide step's outputs stay in Postgres, where its run
			// stored them: the retry reads them there.
			reuse.Steps = append(reuse.Steps, runstate.ReusedStep{Name: ss.Name, Done: true, Outputs: runstate.WideOutputs(*ss.Wide.Outputs)})
		case ss.Wide != nil:
			// Its batches take the items that succeeded from Postgres.
			reuse.Steps = append(reuse.Steps, runstate.ReusedStep{Name: ss.Name, WideFrom: origID})
		case ss.State == runstate.StepSucceeded || ss.State == runstate.StepCached:
			reuse.Steps = append(reuse.Steps, runstate.ReusedStep{Name: ss.Name, Done: true, Outputs: ss.Outputs, Source: workflows.ReuseSource(origID, ss, nil), Artifacts: ss.Artifacts, Metrics: ss.Metrics})
		case len(ss.Items) > 0:
			r := runstate.ReusedStep{Name: ss.Name}
			for k, it := range ss.Items {
				if it.State == runstate.StepSucceeded || it.State == runstate.StepCached {
					r.Items = append(r.Items, runstate.ReusedItem{Index: k, Item: it.Item, Outputs: it.Outputs, Source: workflows.ReuseSource(origID, it, &k)})
				}
			}
			if len(r.Items) > 0 {
				reuse.Steps = append(reuse.Steps, r)
			}
		}
	}
	return reuse, fields
}
