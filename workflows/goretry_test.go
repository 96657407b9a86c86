package workflows_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// goChain is five steps in a row and an exit handler; the step named
// failAt fails. s5's command carries s1's output n, read in Go.
func goChain(ctx workflow.Context, failAt string) (float64, error) {
	run, sctx, err := workflows.Begin(ctx, workflows.RunOptions{})
	if err != nil {
		return 0, err
	}
	run.OnExit(func(ctx workflow.Context, _ workflows.ExitInfo) error {
		_, err := run.Container(ctx, "report", pipeline.Container{Command: []string{"ok exit=1"}}).Get(ctx)
		return err
	})
	cmd := func(name, c string) pipeline.Container {
		if name == failAt {
			c = "fail"
		}
		return pipeline.Container{Command: []string{c}}
	}
	out, err := run.Container(sctx, "s1", cmd("s1", "ok n=7")).Get(sctx)
	if err != nil {
		return 0, run.End(nil, err)
	}
	n, _ := out["n"].(float64)
	for i, c := range []string{"ok s=2", "ok s=3", "ok s=4", fmt.Sprintf("ok s=5 n=%v", n)} {
		name := fmt.Sprintf("s%d", i+2)
		if _, err := run.Container(sctx, name, cmd(name, c)).Get(sctx); err != nil {
			return 0, run.End(nil, err)
		}
	}
	return n, run.End(n, nil)
}

// runGoChain runs goChain, as a retry when reuse is not nil, and returns
// its status and the commands that ran.
func runGoChain(t *testing.T, failAt string, reuse *runstate.Reuse) (runstate.Status, []string) {
	t.Helper()
	env, rt, _ := newEnv(t)
	env.RegisterWorkflowWithOptions(goChain, workflow.RegisterOptions{Name: "test.chain"})
	if reuse != nil {
		require.NoError(t, env.SetMemoOnStart(map[string]any{runstate.MemoReuse: reuse}))
	}
	env.ExecuteWorkflow("test.chain", failAt)
	require.True(t, env.IsWorkflowCompleted())
	return status(t, env), rt.commands()
}

// A retry of a Go pipeline reuses, by name, the steps that succeeded in
// the retried run: their futures return the original outputs at once
// (s5 still gets s1's n), they show CACHED with their source, nothing
// runs for them; the exit handler runs again. resumeFrom reruns the named
// step and every step created after it.
func TestGoPipelineRetryReusesWhatSucceeded(t *testing.T) {
	orig, cmds := runGoChain(t, "s3", nil)
	require.Equal(t, runstate.Failed, orig.State)
	assert.Equal(t, []string{"ok n=7", "ok s=2", "fail", "ok exit=1"}, cmds)

	plan, problems := workflows.PlanGoRetry("orig", orig, nil)
	require.Empty(t, problems)
	require.Len(t, plan.Steps, 2, "s1 and s2; the exit handler that succeeded is not planned")
	// Even named in a plan, an exit handler runs again.
	plan.Steps = append(plan.Steps, runstate.ReusedStep{Name: "report", Done: true})
	retry, cmds := runGoChain(t, "", plan)
	require.Equal(t, runstate.Succeeded, retry.State, "%+v", retry)
	assert.Equal(t, 7.0, retry.Result)
	assert.Equal(t, "orig", retry.RetryOf)
	assert.Equal(t, []string{"ok s=3", "ok s=4", "ok s=5 n=7", "ok exit=1"}, cmds, "only s3 and what follows ran, and the exit handler")
	for _, name := range []string{"s1", "s2"} {
		st := stepNamed(t, retry, name)
		assert.Equal(t, runstate.StepCached, st.State, name)
		assert.Equal(t, &runstate.CacheSource{Run: "orig", Step: name, Attempt: 1}, st.CachedFrom, name)
		assert.Equal(t, "reused from run orig (step "+name+", attempt 1)", st.Message)
		assert.Empty(t, st.Attempts, "a reused step runs nothing")
	}
	assert.Equal(t, map[string]any{"n": 7.0}, stepNamed(t, retry, "s1").Outputs)
	report := stepNamed(t, retry, "report")
	assert.True(t, report.OnExit)
	assert.Equal(t, runstate.StepSucceeded, report.State, "exit handlers are never reused")

	// resumeFrom s4 in the retry: s4 and s5 run again; s1–s3 are reused,
	// s1 still naming the run that ran it.
	plan, problems = workflows.PlanGoRetry("retry", retry, []string{"s4"})
	require.Empty(t, problems)
	again, cmds := runGoChain(t, "", plan)
	require.Equal(t, runstate.Succeeded, again.State)
	assert.Equal(t, []string{"ok s=4", "ok s=5 n=7", "ok exit=1"}, cmds)
	assert.Equal(t, &runstate.CacheSource{Run: "orig", Step: "s1", Attempt: 1}, stepNamed(t, again, "s1").CachedFrom)
	assert.Equal(t, &runstate.CacheSource{Run: "retry", Step: "s3", Attempt: 1}, stepNamed(t, again, "s3").CachedFrom)

	// Unknown steps and exit handlers cannot be named.
	_, problems = workflows.PlanGoRetry("retry", retry, []string{"s2", "nope", "report"})
	require.Len(t, problems, 2)
	assert.Equal(t, workflows.RetryProblem{Index: 1, Message: `run retry has no step "nope"`}, problems[0])
	assert.Equal(t, 2, problems[1].Index)
	assert.Contains(t, problems[1].Message, "exit handlers always run again")
}

// A run started without the memo (every run before Go retries existed)
// reuses nothing, and a memo that cannot be read reuses nothing either,
// with a warning.
func TestGoPipelineRetryWithoutAPlanRunsEverything(t *testing.T) {
	st, cmds := runGoChain(t, "", nil)
	require.Equal(t, runstate.Succeeded, st.State)
	assert.Len(t, cmds, 6)
	assert.Empty(t, st.RetryOf)

	env, rt, _ := newEnv(t)
	env.RegisterWorkflowWithOptions(goChain, workflow.RegisterOptions{Name: "test.chain"})
	require.NoError(t, env.SetMemoOnStart(map[string]any{runstate.MemoReuse: "not a plan"}))
	env.ExecuteWorkflow("test.chain", "")
	require.True(t, env.IsWorkflowCompleted())
	st = status(t, env)
	assert.Equal(t, runstate.Succeeded, st.State)
	assert.Len(t, rt.commands(), 6)
	require.Len(t, st.Warnings, 1)
	assert.Contains(t, st.Warnings[0], "reuse plan could not be read")
}
