package workflows_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// exitOutputs is what the exit handler "report" of exitYAML wrote.
func exitOutputs(t *testing.T, s runstate.Status) map[string]any {
	t.Helper()
	st := stepNamed(t, s, "report")
	require.True(t, st.OnExit, "report is marked as an exit handler")
	out, _ := st.Outputs.(map[string]any)
	require.NotNil(t, out, "report's outputs: %+v", st)
	return out
}

const exitYAML = `
onExit:
  - name: report
    container: {command: ["ok state={{ run.state }} failed={{ join(run.failedSteps, ',') }} model={{ steps.train?.outputs?.model ?? 'none' }}"]}
`

func TestOnExitAfterSuccessSeesStateAndOutputs(t *testing.T) {
	env, rt, _ := newEnv(t)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: train, container: {command: ["ok model=m1"]}}
`+exitYAML, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	s := status(t, env)
	assert.Equal(t, runstate.Succeeded, s.State)
	assert.Equal(t, map[string]any{"state": "SUCCEEDED", "failed": "", "model": "m1"}, exitOutputs(t, s))
	assert.False(t, stepNamed(t, s, "train").OnExit)
	assert.Equal(t, []string{"ok model=m1", "ok state=SUCCEEDED failed= model=m1"}, rt.commands(), "the exit handler runs last")
}

// A failed run: exit handlers see the failed steps; one failing exit
// handler neither stops the others nor changes the run's state (a
// warning says it failed); runIf applies among exit handlers.
func TestOnExitAfterFailure(t *testing.T) {
	env, rt, _ := newEnv(t)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: train, container: {command: ["fail"]}}
  - {name: deploy, dependsOn: [train], container: {command: ["ok"]}}
onExit:
  - name: report
    container: {command: ["ok state={{ run.state }} failed={{ join(run.failedSteps, ',') }} error={{ run.error != '' }}"]}
  - {name: broken, container: {command: ["fail"]}}
  - {name: after-broken, dependsOn: [broken], container: {command: ["ok never"]}}
  - {name: always, dependsOn: [broken], runIf: allDone, container: {command: ["slow"]}}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(env.GetWorkflowError(), &appErr))
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	assert.Contains(t, s.Error, `step "train" failed`)
	assert.Equal(t, map[string]any{"state": "FAILED", "failed": "train", "error": true}, exitOutputs(t, s))
	assert.Equal(t, map[string]runstate.StepState{
		"train": runstate.StepFailed, "deploy": runstate.StepSkipped,
		"report": runstate.StepSucceeded, "broken": runstate.StepFailed,
		"after-broken": runstate.StepSkipped, "always": runstate.StepSucceeded,
	}, stepStates(s))
	assert.Contains(t, s.Warnings, `exit handler "broken" failed: command exited with code 3`)
	assert.Contains(t, rt.commands(), "slow", "an allDone exit handler runs after another's failure")
	assert.NotContains(t, rt.commands(), "ok never")
}

func TestOnExitAfterCancelSignal(t *testing.T) {
	env, rt, _ := newEnv(t)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(runstate.SignalCancel, runstate.CancelRequest{Reason: "wrong-data", Requester: "alice"})
	}, 2*time.Second)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: train, container: {command: ["block"]}}
onExit:
  - name: report
    container: {command: ["ok state={{ run.state }} why={{ run.error }}"]}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	assert.True(t, temporal.IsCanceledError(env.GetWorkflowError()), "got %v", env.GetWorkflowError())
	s := status(t, env)
	assert.Equal(t, runstate.Cancelled, s.State)
	assert.Equal(t, map[string]any{"state": "CANCELLED", "why": "wrong-data"}, exitOutputs(t, s))
	assert.Equal(t, runstate.StepCancelled, stepNamed(t, s, "train").State)
	assert.Equal(t, []string{"block", "ok state=CANCELLED why=wrong-data"}, rt.commands())
}

func TestOnExitAfterTemporalCancel(t *testing.T) {
	env, _, _ := newEnv(t)
	env.RegisterDelayedCallback(env.CancelWorkflow, 2*time.Second)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: train, container: {command: ["block"]}}
`+exitYAML, nil))
	require.True(t, env.IsWorkflowCompleted())
	assert.True(t, temporal.IsCanceledError(env.GetWorkflowError()))
	s := status(t, env)
	assert.Equal(t, runstate.Cancelled, s.State)
	assert.Equal(t, "CANCELLED", exitOutputs(t, s)["state"])
}

// The pipeline deadline stops the steps, not the exit handlers, which run
// after it (longer than what is left of it) and see the run FAILED.
func TestOnExitAfterDeadline(t *testing.T) {
	env, rt, _ := newEnv(t)
	env.SetTestTimeout(30 * time.Second)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
deadline: 2s
steps:
  - {name: train, container: {command: ["block"]}}
onExit:
  - name: report
    container: {command: ["ok state={{ run.state }}"]}
  - {name: slow-cleanup, container: {command: ["slower"]}}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	assert.Contains(t, s.Error, "deadline")
	assert.Equal(t, "FAILED", exitOutputs(t, s)["state"])
	assert.Equal(t, runstate.StepSucceeded, stepNamed(t, s, "slow-cleanup").State)
	assert.Contains(t, rt.commands(), "slower")
}

// Exit handlers have their own timeout: one that hangs is stopped, the
// run ends as its steps did, with a warning.
func TestOnExitTimeout(t *testing.T) {
	env, _, _ := newEnv(t)
	env.SetTestTimeout(30 * time.Second)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: train, container: {command: ["ok"]}}
onExitTimeout: 2s
onExit:
  - {name: hang, container: {command: ["block"]}}
  - {name: after, dependsOn: [hang], container: {command: ["ok"]}}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	s := status(t, env)
	assert.Equal(t, runstate.Succeeded, s.State)
	hang := stepNamed(t, s, "hang")
	assert.Equal(t, runstate.StepCancelled, hang.State)
	assert.Equal(t, "exit handlers stopped: their timeout of 2s passed", hang.Message)
	after := stepNamed(t, s, "after")
	assert.Equal(t, runstate.StepCancelled, after.State)
	assert.Equal(t, "not started: exit handlers stopped: their timeout of 2s passed", after.Message)
	assert.Contains(t, s.Warnings, "exit handlers stopped: their timeout of 2s passed")
}

// A cancel during the steps runs the exit handlers; a second cancel,
// while they run, stops them: the run ends CANCELLED, without hanging.
func TestOnExitSecondCancelStopsHandlers(t *testing.T) {
	env, rt, _ := newEnv(t)
	env.SetTestTimeout(30 * time.Second)
	for i, at := range []time.Duration{time.Second, 4 * time.Second} {
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(runstate.SignalCancel, runstate.CancelRequest{Reason: []string{"first", "second"}[i], Requester: "alice"})
		}, at)
	}
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: train, container: {command: ["block"]}}
onExit:
  - {name: hang, container: {command: ["block"]}}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Cancelled, s.State)
	assert.Equal(t, "first", s.Cancel.Reason)
	assert.Equal(t, runstate.StepCancelled, stepNamed(t, s, "hang").State)
	assert.Contains(t, s.Warnings, "exit handlers stopped: cancel requested by alice: second")
	assert.Equal(t, []string{"block", "block"}, rt.commands())
}

// A cancel that arrives while the exit handlers of a run that succeeded
// run stops them; the run stays SUCCEEDED, as they were told.
func TestOnExitCancelAfterSuccessStopsHandlersOnly(t *testing.T) {
	env, _, _ := newEnv(t)
	env.SetTestTimeout(30 * time.Second)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(runstate.SignalCancel, runstate.CancelRequest{Reason: "enough", Requester: "bob"})
	}, 2*time.Second)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: train, container: {command: ["ok"]}}
onExit:
  - {name: hang, container: {command: ["block"]}}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	s := status(t, env)
	assert.Equal(t, runstate.Succeeded, s.State)
	assert.Nil(t, s.Cancel)
	assert.Equal(t, runstate.StepCancelled, stepNamed(t, s, "hang").State)
	assert.Contains(t, s.Warnings, "exit handlers stopped: cancel requested by bob: enough")
}

// Exit handlers show in the status from the start, PENDING and marked.
func TestOnExitStepsShownFromTheStart(t *testing.T) {
	env, _, _ := newEnv(t)
	env.RegisterDelayedCallback(func() {
		s := status(t, env)
		report := stepNamed(t, s, "report")
		assert.True(t, report.OnExit)
		assert.Equal(t, runstate.StepPending, report.State)
		env.SignalWorkflow(runstate.SignalCancel, runstate.CancelRequest{Reason: "done looking", Requester: "alice"})
	}, time.Second)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: train, container: {command: ["block"]}}
`+exitYAML, nil))
	require.True(t, env.IsWorkflowCompleted())
}

// A step failure and an approval request reach Postgres when they happen
// (webhooks announce them), not only when the run's state changes.
func TestNoticesAreMirroredAtOnce(t *testing.T) {
	env, _, mirrored := newEnv(t)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(runstate.SignalCancel, runstate.CancelRequest{Reason: "stop", Requester: "alice"})
	}, time.Hour)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: broken, container: {command: ["fail"]}}
  - {name: gate, kind: approval}
  - {name: cleanup, dependsOn: [broken], runIf: allDone, container: {command: ["slow"]}}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	var sawFailed, sawWaiting bool
	for _, m := range *mirrored {
		if m.State != runstate.Running {
			continue
		}
		for _, st := range m.Steps {
			sawFailed = sawFailed || (st.Name == "broken" && st.State == runstate.StepFailed)
			sawWaiting = sawWaiting || (st.Name == "gate" && st.Approval != nil)
		}
	}
	assert.True(t, sawFailed, "a RUNNING status with the failed step was mirrored")
	assert.True(t, sawWaiting, "a RUNNING status with the approval request was mirrored")
}

// goExitPipeline is a native Go pipeline with an exit handler that runs
// a step and reports what it was told.
func goExitPipeline(ctx workflow.Context, fail bool) (string, error) {
	run, sctx, err := workflows.Begin(ctx, workflows.RunOptions{ExitTimeout: time.Minute})
	if err != nil {
		return "", err
	}
	run.OnExit(func(ctx workflow.Context, exit workflows.ExitInfo) error {
		_, err := run.Container(ctx, "cleanup", pipeline.Container{Command: []string{"ok state=" + string(exit.State)}}).Get(ctx)
		return err
	})
	run.OnExit(func(ctx workflow.Context, exit workflows.ExitInfo) error {
		return errors.New("second handler broke") // runs first, as defer does
	})
	cmd := "ok"
	if fail {
		cmd = "fail"
	}
	_, err = run.Container(sctx, "train", pipeline.Container{Command: []string{cmd}}).Get(sctx)
	return "done", run.End("done", err)
}

func TestGoPipelineOnExit(t *testing.T) {
	for _, fail := range []bool{false, true} {
		env, rt, _ := newEnv(t)
		env.RegisterWorkflowWithOptions(goExitPipeline, workflow.RegisterOptions{Name: "test.exit"})
		env.ExecuteWorkflow("test.exit", fail)
		require.True(t, env.IsWorkflowCompleted())
		s := status(t, env)
		want, cmd := runstate.Succeeded, "ok state=SUCCEEDED"
		if fail {
			want, cmd = runstate.Failed, "ok state=FAILED"
		}
		assert.Equal(t, want, s.State)
		cleanup := stepNamed(t, s, "cleanup")
		assert.True(t, cleanup.OnExit)
		assert.Equal(t, runstate.StepSucceeded, cleanup.State)
		assert.Contains(t, rt.commands(), cmd)
		assert.Contains(t, s.Warnings, "exit handler 2 failed: second handler broke")
	}
}
