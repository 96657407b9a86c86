package integration

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// forEach.when on the real stack: a sweep over five shards skips the ones
// an earlier step marked as unchanged; skipped items show SKIPPED with
// the reason and null outputs at their index, the others ran real
// commands, a reducer counts what ran, and the run SUCCEEDS. A bad
// condition is refused when the version is pushed, at its path. With
// ATELIER_RECORD_HISTORIES=1 the run's history is recorded as
// workflows/testdata/v9-foreach-when.json for the replay test.
func TestForEachWhenOnTheRealStack(t *testing.T) {
	s := newStack(t)
	code, problems := s.push("bad-when", `
steps:
  - name: fan
    forEach: {items: [1, 2], when: "{{ item > 1 }}"}
    container: {command: ["true"]}
  - name: other
    forEach: {items: [1, 2], when: "steps.missing.outputs.x"}
    container: {command: ["true"]}
`)
	require.Equal(t, 422, code)
	assert.Contains(t, problems["steps[0].forEach.when"], "without {{ }}")
	assert.Contains(t, problems["steps[1].forEach.when"], `unknown step "missing"`)

	s.createPipeline("shards", `
steps:
  - name: diff
    container: {command: [sh, -c, 'echo "{\"changed\": [\"b\", \"d\"]}" > "$ATELIER_OUTPUTS"']}
  - name: rebuild
    forEach:
      items: [a, b, c, d, e]
      when: item in steps.diff.outputs.changed
    container: {command: [sh, -c, 'echo "{\"shard\": \"{{ item }}\"}" > "$ATELIER_OUTPUTS"']}
  - name: count
    container: {command: [sh, -c, 'echo "{\"rebuilt\": {{ len(filter(steps.rebuild.outputs, # != nil)) }}}" > "$ATELIER_OUTPUTS"']}
`)
	id := s.start("shards", nil)
	r := s.waitTerminal(id, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	fan := stepByName(r, "rebuild")
	assert.Equal(t, gen.StepStateSUCCEEDED, fan.State)
	assert.Contains(t, val(fan.Message), `3 of 5 items skipped (forEach.when "item in steps.diff.outputs.changed" is false for them)`)
	var states []gen.StepState
	for _, it := range val(fan.Items) {
		states = append(states, it.State)
	}
	assert.Equal(t, []gen.StepState{gen.StepStateSKIPPED, gen.StepStateSUCCEEDED, gen.StepStateSKIPPED, gen.StepStateSUCCEEDED, gen.StepStateSKIPPED}, states)
	assert.Contains(t, val(val(fan.Items)[0].Message), "skipped: forEach.when")
	assert.Empty(t, val(val(fan.Items)[0].Attempts), "a skipped item never ran")
	assert.Equal(t, map[string]any{"rebuilt": 2.0}, stepByName(r, "count").Outputs)

	// The items route serves the skipped items by state, as any other.
	state := gen.StepStateSKIPPED
	items, err := s.client().ListStepItemsWithResponse(context.Background(), s.project, id, "rebuild", &gen.ListStepItemsParams{State: &state})
	require.NoError(t, err)
	require.Equal(t, 200, items.StatusCode(), "%s", items.Body)
	assert.Len(t, items.JSON200.Items, 3)
	assert.Contains(t, temporalCLI(t, s, "workflow", "describe", "--workflow-id", id), "COMPLETED")
	if os.Getenv("ATELIER_RECORD_HISTORIES") != "" {
		time.Sleep(500 * time.Millisecond) // the final mirror's completion
		recordHistory(t, s, "v9-foreach-when", id)
	}
}
