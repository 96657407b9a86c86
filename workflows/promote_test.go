package workflows_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
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
		if in.Artifact != nil { // registered as the next version
			return activities.MoveModelAliasResult{Before: &before, Version: 7}, nil
		}
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

// newArtifactEnv is newEnv whose container steps store each output
// artifact they declare (an ID and digest naming the step and item).
func newArtifactEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	rt := &fakeRuntime{}
	env.RegisterActivityWithOptions(func(ctx context.Context, req activities.ContainerRequest) (activities.ContainerResult, error) {
		res, err := rt.run(ctx, req)
		if err != nil {
			return res, err
		}
		for _, o := range req.Outputs {
			label := req.Step
			if req.Item != nil {
				label = fmt.Sprintf("%s[%d]", req.Step, *req.Item)
			}
			res.Artifacts = append(res.Artifacts, runstate.Artifact{ID: "art-" + label + "-" + o.Name, Name: o.Name, Type: string(o.Type),
				Digest: "sha256:" + label, Size: 1,
				Producer: runstate.ArtifactProducer{Run: req.RunID, Step: req.Step, Item: req.Item, Attempt: req.Attempt}})
		}
		return res, nil
	}, activity.RegisterOptions{Name: activities.RunContainerName})
	env.RegisterActivityWithOptions(func(context.Context, runstate.Status) error { return nil }, activity.RegisterOptions{Name: activities.MirrorRunName})
	workflows.Register(env)
	return env
}

// A promote step registers one item's artifact of a forEach step,
// "train[<index>].model", the index rendered from another step's
// outputs; an index past the items, or an item that failed, fails the
// step saying so and moves nothing.
func TestPromoteAForEachItem(t *testing.T) {
	const spec = `
steps:
  - name: train
    forEach: {items: [ok, fail, ok]}
    continueOn: failed
    container:
      command: ["{{ item }}"]
      artifacts:
        outputs: [{name: model, type: model}]
  - {name: pick, container: {command: ["ok best=%s"]}}
  - name: promote
    kind: promote
    dependsOn: [train, pick]
    runIf: allDone
    promote: {model: ranker, alias: champion, from: "train[{{ steps.pick.outputs.best }}].model"}
`
	run := func(best string) (runstate.StepStatus, *fakeAliases) {
		t.Helper()
		env := newArtifactEnv(t)
		f := newFakeAliases(env)
		env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, fmt.Sprintf(spec, best), nil))
		require.True(t, env.IsWorkflowCompleted())
		return stepNamed(t, status(t, env), "promote"), f
	}

	st, f := run("2")
	require.Equal(t, runstate.StepSucceeded, st.State, "%s", st.Error)
	require.Len(t, f.moves, 1)
	require.NotNil(t, f.moves[0].Artifact)
	assert.Equal(t, "art-train[2]-model", f.moves[0].Artifact.ID)
	assert.Equal(t, 2, *f.moves[0].Artifact.Producer.Item)
	assert.Nil(t, f.moves[0].Version)
	assert.Equal(t, map[string]any{"model": "ranker", "alias": "champion", "version": 7.0}, st.Outputs)
	assert.Len(t, f.notify, 1)

	st, f = run("3")
	assert.Equal(t, runstate.StepFailed, st.State)
	assert.Equal(t, `from "train[3].model": step "train" (FAILED) has 3 item(s), so no item 3`, st.Error)
	assert.Empty(t, f.moves)

	st, f = run("1")
	assert.Equal(t, runstate.StepFailed, st.State)
	assert.Contains(t, st.Error, `from "train[1].model": item 1 of step "train" did not succeed (FAILED)`)
	assert.Empty(t, f.moves)

	st, f = run("first")
	assert.Equal(t, runstate.StepFailed, st.State)
	assert.Equal(t, `from "train[first].model": item index "first" is not a number (0 for the first item)`, st.Error)
	assert.Empty(t, f.moves)
}
