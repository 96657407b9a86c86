package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/foreach"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// itemStore stands in for Postgres' step_items (activities/foreach holds
// the real activities, exercised by integration/wide_test.go).
type itemStore struct {
	mu     sync.Mutex
	rows   map[string]map[int]runstate.ItemRecord // run/step -> index -> record
	writes int
	// itemRenders are the steps of activities.RenderItemsName calls, one per call.
	itemRenders []string
}

func (s *itemStore) record(_ context.Context, req activities.RecordItemsRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rows == nil {
		s.rows = map[string]map[int]runstate.ItemRecord{}
	}
	key := req.RunID + "/" + req.Step
	if s.rows[key] == nil {
		s.rows[key] = map[int]runstate.ItemRecord{}
	}
	for _, r := range req.Items {
		s.rows[key][r.Index] = r
	}
	s.writes++
	return nil
}

func (s *itemStore) states(key string) map[runstate.StepState]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[runstate.StepState]int{}
	for _, r := range s.rows[key] {
		out[r.State]++
	}
	return out
}

// render is activities.RenderStepName over the stored outputs, as activities/foreach
// does over Postgres.
func (s *itemStore) render(_ context.Context, req activities.RenderRequest) (activities.RenderResult, error) {
	env := pipeline.Env{Params: req.Params, Run: req.Run, Steps: map[string]pipeline.StepEnv{}, Limits: pipeline.ActivityLimits}
	for name, out := range req.Outputs {
		env.Steps[name] = pipeline.StepEnv{Outputs: out}
	}
	s.loadWide(env.Steps, req.Wide)
	return foreach.Render(&req, env)
}

// renderItems is activities.RenderItemsName over the stored outputs.
func (s *itemStore) renderItems(_ context.Context, req activities.RenderItemsRequest) (activities.RenderItemsResult, error) {
	env := pipeline.Env{Params: req.Params, Run: req.Run, Steps: map[string]pipeline.StepEnv{}, Limits: pipeline.ActivityLimits}
	for name, se := range req.Outputs {
		env.Steps[name] = se
	}
	s.loadWide(env.Steps, req.Wide)
	s.mu.Lock()
	s.itemRenders = append(s.itemRenders, req.Step.Name)
	s.mu.Unlock()
	return foreach.RenderItems(&req, env, nil)
}

func (s *itemStore) loadWide(steps map[string]pipeline.StepEnv, refs map[string]runstate.WideRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, ref := range refs {
		list := make([]any, ref.Items)
		for k, r := range s.rows[ref.Run+"/"+ref.Step] {
			if r.State == runstate.StepSucceeded || r.State == runstate.StepCached {
				list[k] = r.Outputs
			}
		}
		steps[name] = pipeline.StepEnv{Outputs: list}
	}
}

func newWideEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *fakeRuntime, *itemStore) {
	env, rt, _ := newEnv(t)
	st := &itemStore{}
	env.RegisterActivityWithOptions(st.record, activity.RegisterOptions{Name: activities.RecordItemsName})
	env.RegisterActivityWithOptions(st.render, activity.RegisterOptions{Name: activities.RenderStepName})
	env.RegisterActivityWithOptions(st.renderItems, activity.RegisterOptions{Name: activities.RenderItemsName})
	env.SetTestTimeout(5 * time.Minute)
	return env, rt, st
}

func wideStep(s runstate.Status, name string) runstate.StepStatus {
	for _, st := range s.Steps {
		if st.Name == name {
			return st
		}
	}
	return runstate.StepStatus{}
}

// A forEach past spec.WideThreshold runs in batch workflows: every item
// runs once, at most parallelism at a time, its record lands in the item
// store, the run status carries counts (not 2,500 items), and a reducer
// reads all outputs through the render activity.
func TestWideForEachRunsInBatchesAndReducesOutputs(t *testing.T) {
	env, rt, st := newWideEnv(t)
	in := input(t, `
steps:
  - name: square
    forEach: {items: "0..2499", parallelism: 300}
    container: {command: ["ok v={{ item * item }}"]}
  - name: total
    container: {command: ["ok sum={{ sum(map(steps.square.outputs, .v)) }} n={{ len(steps.square.outputs) }}"]}
`, nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	s := status(t, env)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)
	sq := wideStep(s, "square")
	require.NotNil(t, sq.Wide)
	assert.Empty(t, sq.Items, "a wide step's items are not in the status")
	assert.Equal(t, 2500, sq.Wide.Items)
	assert.Equal(t, runstate.ItemCounts{Succeeded: 2500}, sq.Wide.Counts)
	assert.Equal(t, sq.Wide.Batches, sq.Wide.BatchesDone)
	assert.Greater(t, sq.Wide.Batches, 2)
	assert.Equal(t, map[runstate.StepState]int{runstate.StepSucceeded: 2500}, st.states(s.RunID+"/square"))
	assert.Less(t, st.writes, 2500/10, "records are written in batches, not per item")
	assert.LessOrEqual(t, rt.maxRan, 300)

	var want float64
	for k := 0; k < 2500; k++ {
		want += float64(k * k)
	}
	assert.Contains(t, rt.commands(), fmt.Sprintf("ok sum=%.0f n=2500", want))
	assert.Equal(t, runstate.StepSucceeded, wideStep(s, "total").State)
	r := st.rows[s.RunID+"/square"][7]
	assert.Equal(t, map[string]any{"v": 49.0}, r.Outputs)
	assert.Equal(t, 7.0, r.Item)
	require.Len(t, r.Attempts, 1)
}

// failurePolicy continue with maxFailedPercent 1: 1% of items failing
// leaves the step SUCCEEDED (their outputs null); one more fails it.
func TestWideFailurePolicyToleratesAPercentage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		every   int // items with k % every == 0 fail
		state   runstate.State
		failed  int
		message string
	}{
		{"within", 100, runstate.Succeeded, 20, "20 of 2000 items failed (tolerated: at most 1%)"},
		{"past", 90, runstate.Failed, 23, "23 of 2000 items failed, more than the 1% tolerated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, rt, st := newWideEnv(t)
			in := input(t, fmt.Sprintf(`
steps:
  - name: fan
    forEach: {items: "0..1999", parallelism: 200, failurePolicy: {mode: continue, maxFailedPercent: 1}}
    container: {command: ["{{ item %% %d == 0 ? 'fail' : 'ok' }} v={{ item }}"]}
`, tc.every), nil)
			env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
			require.True(t, env.IsWorkflowCompleted())
			s := status(t, env)
			assert.Equal(t, tc.state, s.State, s.Error)
			fan := wideStep(s, "fan")
			assert.Equal(t, tc.failed, fan.Wide.Counts.Failed)
			assert.Equal(t, 2000-tc.failed, fan.Wide.Counts.Succeeded, "continue runs every item")
			assert.Len(t, rt.calls, 2000)
			assert.Equal(t, tc.failed, st.states(s.RunID + "/fan")[runstate.StepFailed])
			require.NotEmpty(t, fan.Wide.Failures)
			assert.Equal(t, 0, fan.Wide.Failures[0].Index, "lowest index first")
			if fan.Error != "" {
				assert.Contains(t, fan.Error, tc.message)
			} else {
				assert.Contains(t, fan.Message, tc.message)
			}
		})
	}
}

// The default policy fails fast: once an item failed, no batch starts new
// items, and the step reports how many never ran.
func TestWideFailFastStopsEveryBatch(t *testing.T) {
	env, rt, _ := newWideEnv(t)
	in := input(t, `
steps:
  - name: fan
    forEach: {items: "0..4999", parallelism: 100}
    container: {command: ["{{ item == 150 ? 'fail' : 'ok' }}"]}
  - name: after
    dependsOn: [fan]
    container: {command: ["ok"]}
`, nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	fan := wideStep(s, "fan")
	assert.Equal(t, runstate.StepFailed, fan.State)
	assert.Equal(t, 1, fan.Wide.Counts.Failed)
	assert.Greater(t, fan.Wide.Counts.NotRun, 3000)
	assert.Contains(t, fan.Error, "1 of 5000 items failed; first: item 150")
	assert.Contains(t, fan.Error, "items never ran")
	assert.Less(t, len(rt.calls), 2000)
	assert.Equal(t, runstate.StepSkipped, wideStep(s, "after").State)
}

// Cancelling the run cancels every batch and its running items; the run
// ends CANCELLED with nothing running.
func TestWideCancelReachesEveryBatch(t *testing.T) {
	env, rt, st := newWideEnv(t)
	in := input(t, `
steps:
  - name: fan
    forEach: {items: "0..2999", parallelism: 400}
    container: {command: ["block"]}
`, nil)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(runstate.SignalCancel, runstate.CancelRequest{Reason: "enough", Requester: "alice"})
	}, 5*time.Second)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Cancelled, s.State)
	fan := wideStep(s, "fan")
	assert.Equal(t, runstate.StepCancelled, fan.State)
	assert.Equal(t, 400, fan.Wide.Counts.Cancelled, "every running item is cancelled")
	assert.Equal(t, 2600, fan.Wide.Counts.NotRun)
	// (That no process is left running is checked on the real stack,
	// integration/wide_test.go: the test environment does not stop
	// cancelled activities' goroutines.)
	assert.Len(t, rt.calls, 400, "no item starts after the cancel")
	assert.Equal(t, 400, st.states(s.RunID + "/fan")[runstate.StepCancelled])
}

// Step templates that read a wide step's outputs are rendered by the
// activity, when included; steps that only depend on it are not.
func TestWideOutputsReachOnlyStepsThatReadThem(t *testing.T) {
	env, rt, _ := newWideEnv(t)
	var rendered []string
	var mu sync.Mutex
	st := &itemStore{}
	env.RegisterActivityWithOptions(st.record, activity.RegisterOptions{Name: activities.RecordItemsName})
	env.RegisterActivityWithOptions(func(ctx context.Context, req activities.RenderRequest) (activities.RenderResult, error) {
		mu.Lock()
		rendered = append(rendered, req.Step.Name)
		mu.Unlock()
		return st.render(ctx, req)
	}, activity.RegisterOptions{Name: activities.RenderStepName})
	in := input(t, `
steps:
  - name: fan
    forEach: {items: "1..1001"}
    container: {command: ["ok v={{ item }}"]}
  - name: plain
    dependsOn: [fan]
    container: {command: ["ok"]}
  - name: gated
    when: len(filter(steps.fan.outputs, .v > 1000)) == 1
    container: {command: ["ok gated=1"]}
  - name: gated-off
    when: len(steps.fan.outputs) == 3
    container: {command: ["ok off=1"]}
`, nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)
	sort.Strings(rendered)
	assert.Equal(t, []string{"gated", "gated-off"}, rendered)
	assert.Equal(t, runstate.StepSucceeded, wideStep(s, "gated").State)
	assert.Equal(t, runstate.StepSkipped, wideStep(s, "gated-off").State)
	assert.Contains(t, rt.commands(), "ok gated=1")
	assert.NotContains(t, rt.commands(), "ok off=1")
}

// A pipeline of spec.MaxSteps (1,000) steps validates (its history
// estimate fits) and runs: ten layers of 100 steps, each waiting for one
// step of the layer before.
func TestThousandStepPipeline(t *testing.T) {
	env, rt, _ := newEnv(t)
	env.SetTestTimeout(5 * time.Minute)
	var b strings.Builder
	b.WriteString("steps:\n")
	for i := 0; i < pipeline.MaxSteps; i++ {
		fmt.Fprintf(&b, "  - name: s%d\n    container: {command: [\"ok n=%d\"]}\n", i, i)
		if i >= 100 {
			fmt.Fprintf(&b, "    dependsOn: [s%d]\n", i-100)
		}
	}
	p := parse(t, b.String())
	assert.Less(t, pipeline.EstimateHistoryEvents(&p), pipeline.MaxEstimatedHistoryEvents)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, workflows.PipelineInput{RunID: "run-1", Project: "p1", Pipeline: "big", Version: 1, Spec: p})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	s := status(t, env)
	assert.Equal(t, runstate.Succeeded, s.State)
	assert.Len(t, rt.calls, pipeline.MaxSteps)
	js, err := json.Marshal(s)
	require.NoError(t, err)
	assert.Less(t, len(js), 1<<20, "the status of 1,000 steps fits the query and mirror bound")
}

// The pipeline deadline stops a wide step like a cancel: every batch and
// its running items are cancelled, and the run FAILS naming the deadline.
func TestWideDeadline(t *testing.T) {
	env, rt, _ := newWideEnv(t)
	in := input(t, `
deadline: 5s
steps:
  - name: fan
    forEach: {items: "0..1999", parallelism: 50}
    container: {command: ["block"]}
`, nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	assert.Contains(t, s.Error, "deadline")
	fan := wideStep(s, "fan")
	assert.Equal(t, runstate.StepCancelled, fan.State)
	assert.Equal(t, 50, fan.Wide.Counts.Cancelled)
	assert.Equal(t, 1950, fan.Wide.Counts.NotRun)
	assert.Len(t, rt.calls, 50)
}

// A batch continues as new (at 10,000 history events in production; here
// after 120 items per run): every item still runs exactly once, and the
// counts and failures carry over to the step.
func TestWideBatchesContinueAsNew(t *testing.T) {
	defer workflows.SetBatchItemsPerRun(120)()
	env, rt, st := newWideEnv(t)
	in := input(t, `
steps:
  - name: fan
    forEach: {items: "0..1499", parallelism: 100, failurePolicy: {mode: continue, maxFailedPercent: 2}}
    container: {command: ["{{ item % 50 == 3 ? 'fail' : 'ok' }} v={{ item }}"]}
`, nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)
	fan := wideStep(s, "fan")
	assert.Equal(t, runstate.ItemCounts{Succeeded: 1470, Failed: 30}, fan.Wide.Counts)
	assert.Equal(t, 3, fan.Wide.Failures[0].Index)
	seen := map[int]int{}
	for _, c := range rt.calls {
		seen[*c.Item]++
	}
	assert.Len(t, seen, 1500)
	for k, n := range seen {
		if n != 1 {
			t.Errorf("item %d ran %d times", k, n)
		}
	}
	assert.Equal(t, map[runstate.StepState]int{runstate.StepSucceeded: 1470, runstate.StepFailed: 30}, st.states(s.RunID+"/fan"))
}

// Temporal's own cancel request (UI, CLI, SDK) reaches the batches the
// same way as the cancel signal.
func TestWideTemporalCancelReachesEveryBatch(t *testing.T) {
	env, rt, _ := newWideEnv(t)
	in := input(t, `
steps:
  - name: fan
    forEach: {items: "0..1999", parallelism: 200}
    container: {command: ["block"]}
`, nil)
	env.RegisterDelayedCallback(env.CancelWorkflow, 5*time.Second)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Cancelled, s.State)
	fan := wideStep(s, "fan")
	assert.Equal(t, runstate.StepCancelled, fan.State)
	assert.Equal(t, runstate.ItemCounts{Cancelled: 200, NotRun: 1800}, fan.Wide.Counts)
	assert.Len(t, rt.calls, 200)
}

// A forEach whose list is computed from a wide step's outputs (map,
// filter, reduce, map again): an activity evaluates the list, and the
// step runs as any forEach. Templates of a forEach step may read the wide
// outputs too (widetemplates_test.go has more).
func TestForEachOverWideOutputs(t *testing.T) {
	env, rt, _ := newWideEnv(t)
	in := input(t, `
steps:
  - name: square
    forEach: {items: "0..1199"}
    container: {command: ["ok v={{ item }}"]}
  - name: top
    forEach: {items: "filter(steps.square.outputs, .v > 1190)"}
    container: {command: ["ok got={{ item.v }}"]}
  - name: read
    dependsOn: [top]
    forEach: {items: "[1, 2]"}
    container: {command: ["ok n={{ len(steps.square.outputs) }} v={{ steps.square.outputs[item].v }}"]}
`, nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	top := wideStep(s, "top")
	require.Equal(t, runstate.StepSucceeded, top.State, top.Error)
	require.Len(t, top.Items, 9)
	assert.Equal(t, map[string]any{"v": 1191.0}, top.Items[0].Item)
	assert.Contains(t, rt.commands(), "ok got=1199")
	read := wideStep(s, "read")
	require.Equal(t, runstate.StepSucceeded, read.State, read.Error)
	assert.Contains(t, rt.commands(), "ok n=1200 v=2")
}
