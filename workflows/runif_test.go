package workflows_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/atelier-ml/atelier/runstate"
)

func stepNamed(t *testing.T, s runstate.Status, name string) runstate.StepStatus {
	t.Helper()
	for _, st := range s.Steps {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no step %q", name)
	return runstate.StepStatus{}
}

// A diamond whose one branch is skipped by when: the default join is
// skipped (saying which rule and which dependency), a noneFailed join
// runs, and an anyFailed step is skipped because nothing failed.
func TestRunIfDiamondWithSkippedBranch(t *testing.T) {
	env, rt, _ := newEnv(t)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: a, container: {command: ["ok"]}}
  - {name: b, dependsOn: [a], when: "false", container: {command: ["ok"]}}
  - {name: c, dependsOn: [a], container: {command: ["ok"]}}
  - {name: join, dependsOn: [b, c], container: {command: ["ok join"]}}
  - {name: join-none-failed, dependsOn: [b, c], runIf: noneFailed, container: {command: ["ok none-failed"]}}
  - {name: join-all-done, dependsOn: [b, c], runIf: allDone, container: {command: ["ok all-done"]}}
  - {name: on-failure, dependsOn: [b, c], runIf: anyFailed, container: {command: ["ok on-failure"]}}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	s := status(t, env)
	assert.Equal(t, runstate.Succeeded, s.State)
	assert.Equal(t, map[string]runstate.StepState{
		"a": runstate.StepSucceeded, "b": runstate.StepSkipped, "c": runstate.StepSucceeded,
		"join": runstate.StepSkipped, "join-none-failed": runstate.StepSucceeded,
		"join-all-done": runstate.StepSucceeded, "on-failure": runstate.StepSkipped,
	}, stepStates(s))
	assert.Equal(t, `skipped: runIf allSucceeded (the default) not met: dependency "b" skipped`, stepNamed(t, s, "join").Message)
	assert.Equal(t, "skipped: runIf anyFailed not met: no dependency failed", stepNamed(t, s, "on-failure").Message)
	assert.NotContains(t, rt.commands(), "ok join")
	assert.NotContains(t, rt.commands(), "ok on-failure")
}

// After a failure, anyFailed and allDone steps still run (cleanup), the
// run's other steps are skipped as the run fails fast, and the run ends
// FAILED naming the first failure even though its cleanup succeeded.
func TestRunIfAfterFailure(t *testing.T) {
	env, rt, _ := newEnv(t)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: train, container: {command: ["fail"]}}
  - {name: slow, container: {command: ["slower"]}}
  - {name: evaluate, dependsOn: [train], container: {command: ["ok evaluate"]}}
  - {name: publish, dependsOn: [slow], container: {command: ["ok publish"]}}
  - {name: notify, dependsOn: [train], runIf: anyFailed, container: {command: ["ok notify"]}}
  - {name: cleanup, dependsOn: [evaluate, publish, notify], runIf: allDone, container: {command: ["ok cleanup"]}}
  - {name: tidy, dependsOn: [slow], runIf: noneFailed, container: {command: ["ok tidy"]}}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(env.GetWorkflowError(), &appErr))
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	assert.Equal(t, `step "train" failed: command exited with code 3`, s.Error)
	assert.Equal(t, map[string]runstate.StepState{
		"train": runstate.StepFailed, "slow": runstate.StepSucceeded,
		"evaluate": runstate.StepSkipped, "publish": runstate.StepSkipped,
		"notify": runstate.StepSucceeded, "cleanup": runstate.StepSucceeded, "tidy": runstate.StepSkipped,
	}, stepStates(s))
	assert.Equal(t, `skipped: runIf allSucceeded (the default) not met: dependency "train" failed`, stepNamed(t, s, "evaluate").Message)
	assert.Equal(t, `not started: step "train" failed: command exited with code 3`, stepNamed(t, s, "publish").Message)
	assert.Equal(t, `not started: step "train" failed: command exited with code 3`, stepNamed(t, s, "tidy").Message)
	assert.Subset(t, rt.commands(), []string{"ok notify", "ok cleanup"})
	assert.NotContains(t, rt.commands(), "ok publish")
}

// A forEach step that runs because of a failure runs every item.
func TestRunIfForEachAfterFailure(t *testing.T) {
	env, rt, _ := newEnv(t)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: train, container: {command: ["fail"]}}
  - name: notify
    dependsOn: [train]
    runIf: anyFailed
    forEach: {items: [1, 2, 3], parallelism: 1}
    container: {command: ["ok notified={{ item }}"]}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	assert.Equal(t, runstate.StepSucceeded, stepNamed(t, s, "notify").State)
	assert.Subset(t, rt.commands(), []string{"ok notified=1", "ok notified=2", "ok notified=3"})
}

// continueOn: failed handles a step's failure: it stays FAILED (its
// anyFailed handler runs, its default dependents are skipped), the other
// steps go on (no fail-fast), and the run SUCCEEDS with a warning naming
// it. A forEach step's too many failed items are handled the same way.
func TestContinueOnFailed(t *testing.T) {
	env, rt, _ := newEnv(t)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: probe, continueOn: failed, container: {command: ["fail"]}}
  - {name: shards, continueOn: failed, forEach: {items: [1, 2]}, container: {command: ["fail"]}}
  - {name: slow, container: {command: ["slower"]}}
  - {name: publish, dependsOn: [slow], container: {command: ["ok publish"]}}
  - {name: use-probe, dependsOn: [probe], container: {command: ["ok use-probe"]}}
  - {name: fallback, dependsOn: [probe], runIf: anyFailed, container: {command: ["ok fallback"]}}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	s := status(t, env)
	assert.Equal(t, runstate.Succeeded, s.State, s.Error)
	assert.Equal(t, map[string]runstate.StepState{
		"probe": runstate.StepFailed, "shards": runstate.StepFailed, "slow": runstate.StepSucceeded,
		"publish": runstate.StepSucceeded, "use-probe": runstate.StepSkipped, "fallback": runstate.StepSucceeded,
	}, stepStates(s))
	assert.Subset(t, rt.commands(), []string{"ok publish", "ok fallback"})
	assert.NotContains(t, rt.commands(), "ok use-probe")
	require.Len(t, s.Warnings, 2)
	assert.Contains(t, s.Warnings[0]+s.Warnings[1], `step "probe" failed (continueOn: failed, the run goes on): command exited with code 3`)
}

// A run of a subset of the pipeline: its targets and what they need
// (dependencies, implicit ones through templates included) run; the other
// steps are SKIPPED saying why, whatever their rule, and the pipeline's
// outputs are not evaluated (they may read a step that did not run).
func TestTargetsRunASubset(t *testing.T) {
	env, rt, _ := newEnv(t)
	in := input(t, `
steps:
  - {name: prepare, container: {command: ["ok rows=3"]}}
  - {name: features, container: {command: ["ok features={{ steps.prepare.outputs.rows }}"]}}
  - {name: train, dependsOn: [features], container: {command: ["ok train"]}}
  - {name: report, dependsOn: [train], container: {command: ["ok report"]}}
  - {name: lint, container: {command: ["ok lint"]}}
  - {name: cleanup, dependsOn: [train], runIf: allDone, container: {command: ["ok cleanup"]}}
outputs: {report: "{{ steps.report.outputs.ok }}"}
`, nil)
	in.Targets = []string{"train"}
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	s := status(t, env)
	assert.Equal(t, runstate.Succeeded, s.State, s.Error)
	assert.Equal(t, []string{"train"}, s.Targets)
	assert.Equal(t, map[string]runstate.StepState{
		"prepare": runstate.StepSucceeded, "features": runstate.StepSucceeded, "train": runstate.StepSucceeded,
		"report": runstate.StepSkipped, "lint": runstate.StepSkipped, "cleanup": runstate.StepSkipped,
	}, stepStates(s))
	assert.Equal(t, "skipped: not needed by the run's targets (train)", stepNamed(t, s, "lint").Message)
	assert.ElementsMatch(t, []string{"ok rows=3", "ok features=3", "ok train"}, rt.commands())
	assert.Nil(t, s.Result)
}
