package workflows

import (
	"fmt"
	"strings"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/runstate"
)

// Retry from failure for native Go pipelines.
//
// A declarative retry carries its plan in PipelineInput.Reuse. A Go
// pipeline's input is its author's own type, which has no room for it, so
// the gateway puts the plan in the memo of the retry's start (MemoReuse).
// Temporal records the memo in the WorkflowExecutionStarted event, so
// every replay reads the same plan. A run started without that memo
// (every run that is not a Go retry, and every history recorded before
// this existed) takes none of the reuse paths: the commands of those
// histories are unchanged, which is why no workflow.GetVersion guards it.

// goReuseFromMemo reads the reuse plan of a Go retry from the start memo.
// A plan that cannot be decoded reuses nothing (every step runs), with a
// warning; the memo is in history, so a replay decides the same.
func goReuseFromMemo(ctx workflow.Context) (*runstate.Reuse, string) {
	m := workflow.GetInfo(ctx).Memo
	p, ok := m.GetFields()[runstate.MemoReuse]
	if !ok {
		return nil, ""
	}
	var re runstate.Reuse
	if err := converter.GetDefaultDataConverter().FromPayload(p, &re); err != nil {
		return nil, fmt.Sprintf("the retry's reuse plan could not be read (%v): every step ran again", err)
	}
	return &re, ""
}

// reusedStep ends st CACHED when this run is a retry of a Go pipeline run
// in which the step of that name succeeded: its future is set at once with
// those outputs, and nothing runs. Exit handlers always run again.
func (r *Run) reusedStep(ctx workflow.Context, st *runstate.StepStatus) (StepFuture, bool) {
	if st.OnExit {
		return StepFuture{}, false
	}
	re := r.goReuse.Step(st.Name)
	if re == nil || !re.Done {
		return StepFuture{}, false
	}
	out, _ := re.Outputs.(map[string]any)
	st.Outputs, st.Artifacts, st.Metrics = re.Outputs, re.Artifacts, re.Metrics
	st.CachedFrom = r.goReuse.SourceFor(re.Source, st.Name, nil)
	r.endStep(st, runstate.StepCached, "", reusedMessage(st.CachedFrom))
	fut, set := workflow.NewFuture(ctx)
	set.Set(Outputs(out), nil)
	return StepFuture{f: fut, name: st.Name}, true
}

// RetryProblem is a resumeFrom entry a retry cannot honour: Index is its
// position in resumeFrom.
type RetryProblem struct {
	Index   int
	Message string
}

// PlanGoRetry decides what a retry of the native Go pipeline run origID,
// whose final status is st, takes from it: every step that SUCCEEDED (or
// was itself reused or a cache hit), by name, with its outputs and where
// they come from, except the steps resumeFrom names and every step
// created after the earliest of them.
//
// Go code declares no dependencies, so "downstream" is taken from the
// order the steps were created in, which is their order in the status. A
// step can only use another's outputs, or be called or not because of
// them, once that step exists (its future is read after it was created),
// so whatever depends on a step comes after it. The rule reruns a superset
// of what depends on the named steps: steps created later that did not
// use them run again too, which is safe, only slower. Exit handlers
// (OnExit) always run again and cannot be named.
func PlanGoRetry(origID string, st runstate.Status, resumeFrom []string) (*runstate.Reuse, []RetryProblem) {
	index := make(map[string]int, len(st.Steps))
	for i, ss := range st.Steps {
		index[ss.Name] = i
	}
	from := len(st.Steps)
	var problems []RetryProblem
	for k, name := range resumeFrom {
		i, ok := index[name]
		switch {
		case !ok:
			problems = append(problems, RetryProblem{k, fmt.Sprintf("run %s has no step %q", origID, name)})
		case st.Steps[i].OnExit:
			problems = append(problems, RetryProblem{k, fmt.Sprintf("step %q is an exit handler: exit handlers always run again", name)})
		default:
			from = min(from, i)
		}
	}
	reuse := &runstate.Reuse{RetryOf: origID}
	for _, ss := range st.Steps[:from] {
		if !ss.OnExit && (ss.State == runstate.StepSucceeded || ss.State == runstate.StepCached) {
			out := ss.Outputs
			if ss.Wide != nil && ss.Wide.Outputs != nil {
				// A wide Run.ForEach: its outputs stay where they are.
				out = runstate.WideOutputs(*ss.Wide.Outputs)
			}
			reuse.Steps = append(reuse.Steps, runstate.ReusedStep{Name: ss.Name, Done: true, Outputs: out, Source: ReuseSource(origID, ss, nil), Artifacts: ss.Artifacts, Metrics: ss.Metrics})
		}
	}
	return reuse, problems
}

// ReuseSource is the execution that produced a reused step's (or item's)
// outputs: its own source when it was itself reused (or a cache hit),
// else its last attempt in the retried run (none for a forEach step as a
// whole).
func ReuseSource(origID string, ss runstate.StepStatus, item *int) *runstate.CacheSource {
	if ss.CachedFrom != nil {
		return ss.CachedFrom
	}
	step, _, _ := strings.Cut(ss.Name, "[") // an item is named "<step>[<i>]"
	src := &runstate.CacheSource{Run: origID, Step: step, Item: item}
	if n := len(ss.Attempts); n > 0 {
		src.Attempt = ss.Attempts[n-1].Number
	}
	return src
}
