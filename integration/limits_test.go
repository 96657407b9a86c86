package integration

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/workflows"
)

// Seen by a user: a forEach cut short by another step's failure was reported
// SUCCEEDED with partial outputs.
func TestForEachStoppedBySiblingFailureReportsWhatNeverRan(t *testing.T) {
	s := newStack(t)
	s.createPipeline("cut", `
steps:
  - name: fan
    forEach: {items: [1, 2, 3], parallelism: 1}
    container: {command: ["sh", "-c", "sleep 1; echo '{\"n\": 1}' > $ATELIER_OUTPUTS"]}
  - name: broken
    container: {command: ["sh", "-c", "exit 1"]}
`)
	r := s.waitTerminal(s.startRun(map[string]any{"pipeline": "cut"}), 60*time.Second)
	require.Equal(t, workflows.RunFailed, r.State)
	fan := stepByName(r, "fan")
	assert.Equal(t, workflows.StepCancelled, fan.State)
	assert.Contains(t, fan.Message, "2 of 3 items never ran")
	assert.Nil(t, fan.Outputs)
}

// Specs the validator accepts must fit Temporal's limits: one whose
// successful run alone needs more history events than a workflow may have
// is refused with the limit named.
func TestSpecPastTemporalHistoryLimitIsRefused(t *testing.T) {
	s := newStack(t)
	var b strings.Builder
	b.WriteString("steps:\n")
	items := "[" + strings.TrimSuffix(strings.Repeat("1,", 1000), ",") + "]"
	for i := 0; i < 8; i++ {
		b.WriteString("  - name: s" + strconv.Itoa(i) + "\n    forEach: {items: " + items + "}\n    container: {command: [echo]}\n")
	}
	var prob struct {
		Errors []struct{ Path, Message string } `json:"errors"`
	}
	require.Equal(t, 422, s.do("POST", s.path("/pipelines/wide/versions"), []byte(b.String()), &prob))
	require.NotEmpty(t, prob.Errors)
	assert.Contains(t, prob.Errors[0].Message, "51,200")
}

// Seen by a user: forEach outputs are stored twice in the status, and a
// status over Temporal's 2 MB payload limit cannot be mirrored: the run
// never leaves RUNNING. 40 items × 60 KiB of outputs must end SUCCEEDED in
// REST, with a warning saying outputs were left out of the status.
func TestLargeForEachOutputsStillConverge(t *testing.T) {
	s := newStack(t)
	s.createPipeline("big-outputs", `
steps:
  - name: fan
    forEach: {items: "1..40", parallelism: 10}
    container:
      command: ["sh", "-c", "printf '{\"blob\": \"%s\"}' \"$(head -c 61440 /dev/zero | tr '\\0' x)\" > $ATELIER_OUTPUTS"]
  - name: count
    dependsOn: [fan]
    container: {command: ["sh", "-c", "echo {{ len(steps.fan.outputs) }}"]}
`)
	id := s.startRun(map[string]any{"pipeline": "big-outputs"})
	r := s.waitTerminal(id, 120*time.Second)
	require.Equal(t, workflows.RunSucceeded, r.State, "%+v", r.Status.Error)
	require.NotEmpty(t, r.Status.Warnings)
	assert.Contains(t, r.Status.Warnings[0], "omitted")
	assert.Contains(t, s.rawGet(t, s.path("/runs/%s/steps/count/logs?attempt=1", id)), "40")
}

// Seen by a user: bookkeeping activities shared the worker's slots with
// steps, so one tenant's fan-out that filled them stalled every other run's
// bookkeeping. With both slots taken by team-a's long steps, team-b's run
// must still be mirrored (listed RUNNING), and converge once slots free up.
func TestBookkeepingIsNotStarvedByStepsFillingTheSlots(t *testing.T) {
	s := newStack(t, stackOptions{concurrency: 2})
	other := s.asProject("team-b")
	s.createPipeline("hog", "steps:\n  - name: hog\n    forEach: {items: [1, 2], parallelism: 2}\n    container: {command: [sleep, '8']}\n")
	other.createPipeline("quick", "steps:\n  - name: hello\n    container: {command: [echo, hi]}\n")
	hog := s.startRun(map[string]any{"pipeline": "hog"})
	s.waitRun(hog, 30*time.Second, "both items running", func(r runView) bool {
		fan := stepByName(r, "hog")
		return len(fan.Items) == 2 && fan.Items[0].State == workflows.StepRunning && fan.Items[1].State == workflows.StepRunning
	})

	quick := other.startRun(map[string]any{"pipeline": "quick"})
	other.waitListed(quick, workflows.RunRunning, 5*time.Second) // its mirror did not wait for a step slot
	assert.Equal(t, workflows.RunRunning, s.listState(hog))
	other.waitListed(quick, workflows.RunSucceeded, 30*time.Second)
}
