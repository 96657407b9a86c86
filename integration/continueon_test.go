package integration

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// An expected failure on the real stack: a step with continueOn: failed
// fails, its anyFailed fallback runs and its default dependent is
// skipped, the run SUCCEEDS with a warning naming it, and Temporal shows
// the workflow COMPLETED. The same run carries a step's metrics and an
// image per forEach item; with ATELIER_RECORD_HISTORIES=1 its history is
// recorded as workflows/testdata/v8-continue-on.json for the replay test.
func TestContinueOnFailedOnTheRealStack(t *testing.T) {
	s := newStack(t)
	s.createPipeline("continue-on", `
steps:
  - name: train
    container: {command: [sh, -c, 'echo "{\"accuracy\": 0.9, \"loss\": [0.5, 0.2]}" > "$ATELIER_METRICS"']}
  - name: shards
    forEach: {items: [{os: debian}, {os: alpine}]}
    container: {image: "busybox:{{ item.os }}", command: ["true"]}
  - {name: probe, continueOn: failed, container: {command: [sh, -c, "exit 3"]}}
  - {name: fallback, dependsOn: [probe], runIf: anyFailed, container: {command: ["true"]}}
  - {name: use-probe, dependsOn: [probe], container: {command: ["true"]}}
`)
	id := s.start("continue-on", nil)
	r := s.waitTerminal(id, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	assert.Equal(t, gen.StepStateFAILED, stepByName(r, "probe").State)
	assert.Equal(t, gen.StepStateSUCCEEDED, stepByName(r, "fallback").State)
	assert.Equal(t, gen.StepStateSKIPPED, stepByName(r, "use-probe").State)
	assert.Contains(t, val(r.Status.Warnings), `step "probe" failed (continueOn: failed, the run goes on): command exited with code 3`)
	require.NotNil(t, stepByName(r, "train").Metrics)
	assert.Contains(t, temporalCLI(t, s, "workflow", "describe", "--workflow-id", id), "COMPLETED")
	if os.Getenv("ATELIER_RECORD_HISTORIES") != "" {
		time.Sleep(500 * time.Millisecond) // the final mirror's completion
		recordHistory(t, s, "v8-continue-on", id)
	}
}
