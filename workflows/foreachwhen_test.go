package workflows_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/runstate"
)

// forEach.when (Argo's when inside a loop): items whose condition is false
// end SKIPPED with null outputs at their index, the others run, and the
// step SUCCEEDS saying how many were skipped. The condition reads item,
// params and other steps' outputs; an item whose condition cannot be
// evaluated fails alone, as a template error does.
func TestForEachWhenSkipsItems(t *testing.T) {
	env, rt, _ := newEnv(t)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
params:
  - {name: skip, type: integer, default: 4}
steps:
  - name: prep
    container: {command: ["ok min=1"]}
  - name: fan
    forEach:
      items: [1, 2, 3, 4, 5]
      when: int(item) % 2 == 1 && item > steps.prep.outputs.min || item == params.skip
    container: {command: ["ok v={{ item }}"]}
  - name: sum
    container: {command: ["ok n={{ len(filter(steps.fan.outputs, # != nil)) }}"]}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	s := status(t, env)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)
	fan := wideStep(s, "fan")
	assert.Equal(t, runstate.StepSucceeded, fan.State)
	assert.Equal(t, `2 of 5 items skipped (forEach.when "int(item) % 2 == 1 && item > steps.prep.outputs.min || item == params.skip" is false for them); their outputs are null`, fan.Message)
	var states []runstate.StepState
	for _, it := range fan.Items {
		states = append(states, it.State)
	}
	assert.Equal(t, []runstate.StepState{runstate.StepSkipped, runstate.StepSkipped, runstate.StepSucceeded, runstate.StepSucceeded, runstate.StepSucceeded}, states)
	assert.Contains(t, fan.Items[0].Message, "skipped: forEach.when")
	assert.Empty(t, fan.Items[0].Attempts, "a skipped item never ran")
	assert.Equal(t, []any{nil, nil, map[string]any{"v": 3.0}, map[string]any{"v": 4.0}, map[string]any{"v": 5.0}}, fan.Outputs)
	assert.Contains(t, rt.commands(), "ok n=3")
	for _, c := range rt.commands() {
		assert.NotContains(t, []string{"ok v=1", "ok v=2"}, c, "skipped items run nothing")
	}
}

// Every item skipped: the step still SUCCEEDS (with null outputs), so a
// step after it runs; a condition that is not a boolean fails its item.
func TestForEachWhenAllSkippedAndBadCondition(t *testing.T) {
	env, rt, _ := newEnv(t)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - name: none
    forEach: {items: [1, 2], when: "item > 5"}
    container: {command: ["ok"]}
  - name: after
    container: {command: ["ok n={{ len(steps.none.outputs) }}"]}
  - name: bad
    forEach: {items: [true, "yes"], when: "item"}
    container: {command: ["ok"]}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	none := wideStep(s, "none")
	assert.Equal(t, runstate.StepSucceeded, none.State)
	assert.Contains(t, none.Message, "2 of 2 items skipped")
	assert.Equal(t, []any{nil, nil}, none.Outputs)
	assert.Equal(t, runstate.StepSucceeded, wideStep(s, "after").State)
	assert.Contains(t, rt.commands(), "ok n=2")
	bad := wideStep(s, "bad")
	assert.Equal(t, runstate.StepFailed, bad.State)
	assert.Equal(t, runstate.StepSucceeded, bad.Items[0].State)
	assert.Equal(t, runstate.StepFailed, bad.Items[1].State)
	assert.Contains(t, bad.Items[1].Error, `forEach.when "item": must evaluate to true or false`)
}

// A wide forEach evaluates forEach.when per item in its batches: skipped
// items are counted (not as cancelled, not as never run), recorded
// SKIPPED with null outputs, and the step SUCCEEDS. A small forEach whose
// condition reads the wide step's outputs has it evaluated by the render
// activity, with its templates.
func TestWideForEachWhen(t *testing.T) {
	env, rt, st := newWideEnv(t)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - name: square
    forEach: {items: "0..2499", parallelism: 300, when: "item % 10 == 0"}
    container: {command: ["ok v={{ item * item }}"]}
  - name: kept
    container: {command: ["ok n={{ len(filter(steps.square.outputs, # != nil)) }}"]}
  - name: pick
    forEach: {items: "0..19", when: "steps.square.outputs[item] != nil"}
    container: {command: ["ok picked={{ item }}"]}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	s := status(t, env)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)
	sq := wideStep(s, "square")
	require.NotNil(t, sq.Wide)
	assert.Equal(t, runstate.ItemCounts{Succeeded: 250, Skipped: 2250}, sq.Wide.Counts)
	assert.Contains(t, sq.Message, "2250 of 2500 items skipped")
	assert.Equal(t, map[runstate.StepState]int{runstate.StepSucceeded: 250, runstate.StepSkipped: 2250}, st.states(s.RunID+"/square"))
	assert.Nil(t, st.rows[s.RunID+"/square"][7].Outputs)
	assert.Contains(t, rt.commands(), "ok n=250")

	pick := wideStep(s, "pick")
	assert.Equal(t, runstate.StepSucceeded, pick.State)
	var ran []string
	for _, c := range rt.commands() {
		if strings.HasPrefix(c, "ok picked") {
			ran = append(ran, c)
		}
	}
	slices.Sort(ran)
	assert.Equal(t, []string{"ok picked=0", "ok picked=10"}, ran)
	assert.Equal(t, runstate.StepSkipped, pick.Items[1].State)
	assert.Contains(t, st.itemRenders, "pick", "the condition over wide outputs is evaluated by the render activity")
	assert.Equal(t, 18, countState(pick.Items, runstate.StepSkipped))
}

func countState(items []runstate.StepStatus, state runstate.StepState) int {
	n := 0
	for _, it := range items {
		if it.State == state {
			n++
		}
	}
	return n
}
