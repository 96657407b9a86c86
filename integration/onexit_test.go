package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/examples/gopipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// exitPipeline blocks in its step until cancelled; its exit handler
// writes how the run ends to dir/exit, then runs for hold (a sleep) so a
// test can cancel it too.
func exitPipeline(dir, hold string) string {
	return fmt.Sprintf(`
steps:
  - name: prepare
    container: {command: ["sh", "-c", "echo '{\"scratch\": \"%[1]s/scratch\"}' > \"$ATELIER_OUTPUTS\""]}
  - name: train
    dependsOn: [prepare]
    container: {command: ["sh", "-c", "echo $$ > %[1]s/pid; sleep 300"]}
onExitTimeout: 5m
onExit:
  - name: report
    container:
      command: ["sh", "-c", "echo \"$STATE $SCRATCH $WHY\" > %[1]s/exit; sleep %[2]s"]
      env:
        STATE: "{{ run.state }}"
        SCRATCH: "{{ steps.prepare.outputs.scratch }}"
        WHY: "{{ run.error }}"
`, dir, hold)
}

// An exit handler runs after a cancel through REST, sees the run's state
// (CANCELLED), the cancel's reason and a finished step's outputs, and the
// run then ends CANCELLED with the handler SUCCEEDED and marked onExit.
func TestExitHandlerRunsAfterCancel(t *testing.T) {
	s := newStack(t)
	dir := stepScratchDir(t)
	s.createPipeline("exit", exitPipeline(dir, "0"))
	id := s.start("exit", nil)
	waitFile(t, filepath.Join(dir, "pid"), 30*time.Second)

	s.cancel(id, "wrong-data")

	got := waitFile(t, filepath.Join(dir, "exit"), 30*time.Second)
	assert.Equal(t, "CANCELLED "+dir+"/scratch wrong-data", strings.TrimSpace(got))
	r := s.waitTerminal(id, 30*time.Second)
	require.Equal(t, gen.RunStateCANCELLED, r.State)
	report := stepByName(r, "report")
	assert.True(t, val(report.OnExit))
	assert.Equal(t, gen.StepStateSUCCEEDED, report.State)
	assert.Equal(t, gen.StepStateCANCELLED, stepByName(r, "train").State)
	assert.False(t, val(stepByName(r, "train").OnExit))
}

// A second cancel, while the exit handlers run, stops them: the run ends
// CANCELLED at once instead of waiting for them, with a warning saying so.
func TestSecondCancelStopsExitHandlers(t *testing.T) {
	s := newStack(t)
	dir := stepScratchDir(t)
	s.createPipeline("exit", exitPipeline(dir, "300"))
	id := s.start("exit", nil)
	waitFile(t, filepath.Join(dir, "pid"), 30*time.Second)
	s.cancel(id, "first")
	waitFile(t, filepath.Join(dir, "exit"), 30*time.Second)
	r := s.getRun(id)
	require.Equal(t, gen.RunStateCANCELLING, r.State, "the run is still cancelling while its exit handlers run")
	require.Equal(t, gen.StepStateRUNNING, stepByName(r, "report").State)

	start := time.Now()
	s.cancel(id, "second")
	r = s.waitTerminal(id, 30*time.Second)
	assert.Less(t, time.Since(start), 20*time.Second)
	assert.Equal(t, gen.RunStateCANCELLED, r.State)
	report := stepByName(r, "report")
	assert.Equal(t, gen.StepStateCANCELLED, report.State)
	stopped := false
	for _, w := range val(r.Status.Warnings) {
		stopped = stopped || (strings.HasPrefix(w, "exit handlers stopped: cancel requested by ci-editor (") && strings.HasSuffix(w, "): second"))
	}
	assert.True(t, stopped, "warnings: %v", r.Status.Warnings)
	_, err := os.Stat(filepath.Join(dir, "exit"))
	assert.NoError(t, err)
}

// startCleanupRun starts the example Go pipeline with an exit handler
// (gopipeline.TrainWithCleanup) through the Temporal SDK.
func (s *stack) startCleanupRun(id string, in gopipeline.CleanupInput) string {
	s.t.Helper()
	_, err := s.temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: id, TaskQueue: s.cfg.TaskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(temporal.NewSearchAttributeKeyKeyword(runstate.SAProject).ValueSet(s.project)),
	}, gopipeline.CleanupName, in)
	require.NoError(s.t, err)
	return id
}

var registerCleanup = stackOptions{register: func(r worker.Registry) {
	r.RegisterWorkflowWithOptions(gopipeline.TrainWithCleanup, workflow.RegisterOptions{Name: gopipeline.CleanupName})
}}

// A Go pipeline's exit handler (Run.OnExit) runs after success, failure
// and a cancel, sees how the run ends, and its step is marked onExit.
// With ATELIER_RECORD_HISTORIES=1 it records the v5-exit-go-* histories.
func TestGoExitHandler(t *testing.T) {
	s := newStack(t, registerCleanup)
	suffix := fmt.Sprint(time.Now().UnixNano())
	ids := map[string]string{
		"v5-exit-go-succeeded": s.startCleanupRun("ok-"+suffix, gopipeline.CleanupInput{}),
		"v5-exit-go-failed":    s.startCleanupRun("fail-"+suffix, gopipeline.CleanupInput{Fail: true}),
		"v5-exit-go-cancelled": s.startCleanupRun("cancel-"+suffix, gopipeline.CleanupInput{Sleep: 300}),
	}
	s.waitStepState(ids["v5-exit-go-cancelled"], "train", gen.StepStateRUNNING)
	s.cancel(ids["v5-exit-go-cancelled"], "enough")
	want := map[string]gen.RunState{
		"v5-exit-go-succeeded": gen.RunStateSUCCEEDED, "v5-exit-go-failed": gen.RunStateFAILED, "v5-exit-go-cancelled": gen.RunStateCANCELLED,
	}
	for name, id := range ids {
		r := s.waitTerminal(id, 60*time.Second)
		require.Equal(t, want[name], r.State, "%s: %+v", name, r.Status)
		cleanup := stepByName(r, "remove-scratch")
		assert.True(t, val(cleanup.OnExit), name)
		assert.Equal(t, gen.StepStateSUCCEEDED, cleanup.State, name)
		logs := s.stepLog(id, "remove-scratch", nil)
		assert.Contains(t, logs, "the run ended "+string(want[name]), name)
		if os.Getenv("ATELIER_RECORD_HISTORIES") != "" {
			time.Sleep(500 * time.Millisecond) // the final mirror's completion
			recordHistory(t, s, name, id)
		}
	}
}
