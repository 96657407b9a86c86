package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
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
	r := s.waitTerminal(s.start("cut", nil), 60*time.Second)
	require.Equal(t, gen.RunStateFAILED, r.State)
	fan := stepByName(r, "fan")
	assert.Equal(t, gen.StepStateCANCELLED, fan.State)
	assert.Contains(t, val(fan.Message), "2 of 3 items never ran")
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
	res, err := s.client().CreatePipelineVersionWithBodyWithResponse(context.Background(), s.project, "wide", "application/yaml", strings.NewReader(b.String()))
	require.NoError(t, err)
	require.Equal(t, 422, res.StatusCode(), "%s", res.Body)
	require.NotNil(t, res.ApplicationproblemJSON422)
	errs := val(res.ApplicationproblemJSON422.Errors)
	require.NotEmpty(t, errs)
	assert.Contains(t, errs[0].Message, "51,200")
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
	id := s.start("big-outputs", nil)
	r := s.waitTerminal(id, 120*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", val(r.Status.Error))
	require.NotEmpty(t, val(r.Status.Warnings))
	assert.Contains(t, (*r.Status.Warnings)[0], "omitted")
	assert.Contains(t, s.stepLog(id, "count", &gen.GetStepLogsParams{Attempt: ptrTo(1)}), "40")
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
	hog := s.start("hog", nil)
	s.waitRun(hog, 30*time.Second, "both items running", func(r gen.Run) bool {
		items := val(stepByName(r, "hog").Items)
		return len(items) == 2 && items[0].State == gen.StepStateRUNNING && items[1].State == gen.StepStateRUNNING
	})

	quick := other.start("quick", nil)
	other.waitListed(quick, gen.RunStateRUNNING, 5*time.Second) // its mirror did not wait for a step slot
	assert.Equal(t, gen.RunStateRUNNING, s.listState(hog))
	other.waitListed(quick, gen.RunStateSUCCEEDED, 30*time.Second)
}
