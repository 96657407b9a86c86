package workflows_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/runstate"
)

// fakeAliases plays the registry's activities: it records each move and
// which endpoints were told; an alias named "missing" is NotFound.
type fakeAliases struct {
	mu     sync.Mutex
	moves  []activities.MoveModelAliasInput
	notify []activities.NotifyModelMovedRequest
}

func newFakeAliases(env *testsuite.TestWorkflowEnvironment) *fakeAliases {
	f := &fakeAliases{}
	env.RegisterActivityWithOptions(func(_ context.Context, in activities.MoveModelAliasInput) (activities.MoveModelAliasResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.moves = append(f.moves, in)
		if in.Model == "missing" {
			return activities.MoveModelAliasResult{NotFound: "model missing has no version 3"}, nil
		}
		before := 1
		return activities.MoveModelAliasResult{Before: &before, Version: *in.Version}, nil
	}, activity.RegisterOptions{Name: activities.SetModelAliasName})
	env.RegisterActivityWithOptions(func(_ context.Context, req activities.NotifyModelMovedRequest) (int, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.notify = append(f.notify, req)
		return 2, nil
	}, activity.RegisterOptions{Name: activities.NotifyModelMovedName})
	return f
}

// A promote step renders its version from another step's outputs, moves
// the alias as "run <id>", tells the project's endpoints and outputs what
// the alias names now; an unknown model fails the step (and the run)
// naming it, and tells nobody.
func TestPromoteStep(t *testing.T) {
	env, _, _ := newEnv(t)
	f := newFakeAliases(env)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: evaluate, container: {command: ["ok best=3"]}}
  - name: promote
    kind: promote
    promote: {model: ranker, alias: champion, version: "{{ steps.evaluate.outputs.best }}"}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	run := status(t, env)
	st := stepNamed(t, run, "promote")
	assert.Equal(t, runstate.StepSucceeded, st.State)
	assert.Equal(t, map[string]any{"model": "ranker", "alias": "champion", "version": 3.0}, st.Outputs)
	assert.Equal(t, "ranker@champion is version 3 (was 1); 2 endpoint(s) told", st.Message)
	require.Len(t, f.moves, 1)
	assert.Equal(t, "run "+run.RunID, f.moves[0].Actor)
	assert.Equal(t, "p1", f.moves[0].Project)
	require.Len(t, f.notify, 1)
	assert.Equal(t, activities.ModelMoved{Model: "ranker", Alias: "champion"}, f.notify[0].Moved)

	env, _, _ = newEnv(t)
	f = newFakeAliases(env)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - name: promote
    kind: promote
    promote: {model: missing, alias: champion, version: "3"}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.Error(t, env.GetWorkflowError())
	s := status(t, env)
	assert.Equal(t, `step "promote" failed: model missing has no version 3`, s.Error)
	assert.Empty(t, f.notify, "nothing moved: nobody is told")
}
