package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/workflows"
	"github.com/atelier-ml/atelier/workflows/runclient"
	"github.com/atelier-ml/atelier/workflows/spec"
)

var (
	ptRunNotFinished = problemType{"run-not-finished", "Run still running", http.StatusConflict}
	ptNotRetryable   = problemType{"not-retryable", "Run cannot be retried", http.StatusConflict}
)

// RetryRun starts a new run of a finished declarative run's version and
// params, carrying the outputs of what succeeded (workflows.Reuse), so
// that only the rest runs.
func (s *server) RetryRun(ctx context.Context, req gen.RetryRunRequestObject) (gen.RetryRunResponseObject, error) {
	orig, err := s.getRun(ctx, req.Project, req.Run)
	if err != nil {
		return nil, err
	}
	if orig.Workflow != workflows.PipelineWorkflowName {
		return nil, newProblem(ptNotRetryable, "run %s is a Go pipeline (%s): retry applies to declarative pipeline runs; start it again with POST …/runs", orig.ID, orig.Workflow)
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
	var in workflows.PipelineInput
	if err := json.Unmarshal(orig.Input, &in); err != nil {
		return nil, internalError(fmt.Errorf("decode the input of run %s: %w", orig.ID, err))
	}
	reuse, fields := planReuse(orig.ID, &in.Spec, st, deref(deref(req.Body).ResumeFrom))
	if len(fields) > 0 {
		return nil, newProblem(ptInvalid, "%s", summarize(fields)).withErrors(fields)
	}
	id := s.newID()
	in.RunID, in.Reuse = id, reuse
	input, err := json.Marshal(in)
	if err != nil {
		return nil, internalError(err)
	}
	now := s.now().UTC()
	row := catalog.Run{
		ID: id, Project: orig.Project, Pipeline: orig.Pipeline, Version: orig.Version,
		Workflow: workflows.PipelineWorkflowName, State: workflows.RunPending, Input: input,
		CreatedAt: now, UpdatedAt: now, CreatedBy: principal(ctx).Name,
	}
	run, _, err := s.cat.CreateRun(ctx, row)
	if err != nil {
		return nil, internalError(err)
	}
	start := runclient.StartRequest{
		RunID: id, Workflow: workflows.PipelineWorkflowName, TaskQueue: s.taskQueue,
		Input: json.RawMessage(input), Project: orig.Project, Pipeline: orig.Pipeline, CreatedBy: row.CreatedBy,
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

// planReuse decides what a retry takes from the run it retries: every step
// that succeeded (or was itself reused), unless it is in resumeFrom or
// downstream of one; and, of a forEach step that did not succeed, the
// items that did.
func planReuse(origID string, p *spec.Pipeline, st workflows.RunStatus, resumeFrom []string) (*workflows.Reuse, []gen.FieldError) {
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
	deps := spec.Dependencies(p)
	for changed := true; changed; {
		changed = false
		for j := range p.Steps {
			if !rerun[j] && slices.ContainsFunc(deps[j], func(i int) bool { return rerun[i] }) {
				rerun[j], changed = true, true
			}
		}
	}
	reuse := &workflows.Reuse{RetryOf: origID}
	for _, ss := range st.Steps {
		i, ok := index[ss.Name]
		if !ok || rerun[i] {
			continue
		}
		switch {
		case ss.Wide != nil && (ss.State == workflows.StepSucceeded || ss.State == workflows.StepCached) && ss.Wide.Outputs != nil:
			// A wide step's outputs stay in Postgres, where its run
			// stored them: the retry reads them there.
			reuse.Steps = append(reuse.Steps, workflows.ReusedStep{Name: ss.Name, Done: true, Outputs: workflows.WideOutputs(*ss.Wide.Outputs)})
		case ss.Wide != nil:
			// Its batches take the items that succeeded from Postgres.
			reuse.Steps = append(reuse.Steps, workflows.ReusedStep{Name: ss.Name, WideFrom: origID})
		case ss.State == workflows.StepSucceeded || ss.State == workflows.StepCached:
			reuse.Steps = append(reuse.Steps, workflows.ReusedStep{Name: ss.Name, Done: true, Outputs: ss.Outputs, Source: reuseSource(origID, ss, nil)})
		case len(ss.Items) > 0:
			r := workflows.ReusedStep{Name: ss.Name}
			for k, it := range ss.Items {
				if it.State == workflows.StepSucceeded || it.State == workflows.StepCached {
					r.Items = append(r.Items, workflows.ReusedItem{Index: k, Item: it.Item, Outputs: it.Outputs, Source: reuseSource(origID, it, &k)})
				}
			}
			if len(r.Items) > 0 {
				reuse.Steps = append(reuse.Steps, r)
			}
		}
	}
	return reuse, fields
}

// reuseSource is the execution that produced a reused step's (or item's)
// outputs: its own source when it was itself reused, else its last attempt
// in the retried run (none for a forEach step as a whole).
func reuseSource(origID string, ss workflows.StepStatus, item *int) *workflows.CacheSource {
	if ss.CachedFrom != nil {
		return ss.CachedFrom
	}
	step, _, _ := strings.Cut(ss.Name, "[") // an item is named "<step>[<i>]"
	src := &workflows.CacheSource{Run: origID, Step: step, Item: item}
	if n := len(ss.Attempts); n > 0 {
		src.Attempt = ss.Attempts[n-1].Number
	}
	return src
}
