package workflows_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// wideExitYAML has a wide step read by an exit handler (its templates and
// its when) and by the pipeline's outputs.
const wideExitYAML = `
steps:
  - name: square
    forEach: {items: "0..1199", parallelism: 200}
    container: {command: ["ok v={{ item * item }}"]}
outputs:
  total: "{{ sum(map(steps.square.outputs, .v)) }}"
  count: "{{ len(steps.square.outputs) }}"
  label: "squares of {{ len(steps.square.outputs) }} items"
onExit:
  - name: report
    when: "len(steps.square.outputs) == 1200"
    container: {command: ["ok state={{ run.state }} n={{ len(steps.square.outputs) }} last={{ steps.square.outputs[1199].v }}"]}
  - name: each
    forEach: {items: "[0, 600, 1199]"}
    container: {command: ["ok sq={{ steps.square.outputs[item].v }}"]}
  - name: some
    forEach: {items: "filter(map(steps.square.outputs, .v), # < 10)"}
    container: {command: ["ok small={{ item }}"]}
`

// Exit handlers and the pipeline's outputs read a wide step's outputs
// through the render activity: they see the list, not its reference.
func TestExitHandlersAndOutputsReadWideOutputs(t *testing.T) {
	env, rt, _ := newWideEnv(t)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, wideExitYAML, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	s := status(t, env)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)

	var want float64
	for k := 0; k < 1200; k++ {
		want += float64(k * k)
	}
	wantOut := map[string]any{"total": want, "count": 1200.0, "label": "squares of 1200 items"}
	var res workflows.PipelineResult
	require.NoError(t, env.GetWorkflowResult(&res))
	assert.Equal(t, wantOut, res.Outputs)
	assert.Equal(t, wantOut, s.Result)

	report := stepNamed(t, s, "report")
	assert.Equal(t, runstate.StepSucceeded, report.State, report.Error)
	cmds := rt.commands()
	assert.Contains(t, cmds, fmt.Sprintf("ok state=SUCCEEDED n=1200 last=%d", 1199*1199))
	for _, k := range []int{0, 600, 1199} {
		assert.Contains(t, cmds, fmt.Sprintf("ok sq=%d", k*k), "an exit forEach's items read the wide outputs")
	}
	for _, v := range []int{0, 1, 4, 9} {
		assert.Contains(t, cmds, fmt.Sprintf("ok small=%d", v), "an exit forEach's list is computed from them")
	}
	assert.Equal(t, runstate.StepSucceeded, stepNamed(t, s, "some").State)
}

// A pipeline output that copies a wide step's outputs whole is far over
// the outputs' limit: the run fails naming it, and the exit handlers
// still run (they read the list itself).
func TestWideOutputsOverTheLimitFailTheRun(t *testing.T) {
	env, rt, _ := newWideEnv(t)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - name: square
    forEach: {items: "0..1199", parallelism: 200}
    container: {command: ["ok v=item-{{ item }}-with-some-padding-to-pass-the-limit-of-the-outputs-of-a-pipeline"]}
outputs:
  all: "{{ steps.square.outputs }}"
onExit:
  - name: report
    container: {command: ["ok state={{ run.state }} n={{ len(steps.square.outputs) }}"]}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	require.Equal(t, runstate.Failed, s.State)
	assert.Contains(t, s.Error, "evaluating the pipeline's outputs: outputs.all: {{ steps.square.outputs }}:")
	assert.Contains(t, s.Error, "64 KiB")
	assert.Contains(t, rt.commands(), "ok state=FAILED n=1200")
}

// Runs from before versionWideReaders rendered exit handlers and outputs
// in the workflow over the reference object; replaying them must do the
// same (no render activity where their histories have none).
func TestWideReadersKeepTheBehaviourOfEarlierRuns(t *testing.T) {
	env, rt, _ := newWideEnv(t)
	env.OnGetVersion("atelier.wide-exit-outputs", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - name: square
    forEach: {items: "0..1199", parallelism: 200}
    container: {command: ["ok v={{ item }}"]}
outputs:
  ref: "{{ steps.square.outputs }}"
onExit:
  - name: report
    container: {command: ["ok n={{ len(steps.square.outputs) }}"]}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)
	ref := map[string]any{"run": s.RunID, "step": "square", "items": 1200.0}
	assert.Equal(t, map[string]any{"ref": map[string]any{"atelier.wideOutputs": ref}}, s.Result)
	assert.Contains(t, rt.commands(), "ok n=1", "the reference object has one key")
}

// A child pipeline fans out wide and reduces the outputs in its own
// outputs: the parent (declarative here; a Go pipeline's Run.Pipeline
// takes the same path) gets the reduction, never the 1,200 outputs.
func TestChildPipelineReducesItsWideOutputs(t *testing.T) {
	env, rt, cat, _ := newChildEnv(t)
	st := &itemStore{}
	env.RegisterActivityWithOptions(st.record, activity.RegisterOptions{Name: activities.RecordItemsName})
	env.RegisterActivityWithOptions(st.render, activity.RegisterOptions{Name: activities.RenderStepName})
	env.SetTestTimeout(5 * time.Minute)
	cat.add(t, "p1", "fan", `
steps:
  - name: square
    forEach: {items: "0..1199", parallelism: 200}
    container: {command: ["ok v={{ item * item }}"]}
outputs:
  total: "{{ sum(map(steps.square.outputs, .v)) }}"
`)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - name: fan
    kind: pipeline
    pipeline: {name: fan}
  - name: report
    container: {command: ["ok got={{ steps.fan.outputs.total }}"]}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var want float64
	for k := 0; k < 1200; k++ {
		want += float64(k * k)
	}
	assert.Contains(t, rt.commands(), fmt.Sprintf("ok got=%.0f", want))
}
