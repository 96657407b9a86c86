package workflows_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/runstate"
)

// fanIns plays atelier.foreach.fan-in over the item store: it checks
// that the items' records carry their artifacts and answers a directory
// reference (or problem).
type fanIns struct {
	mu      sync.Mutex
	st      *itemStore
	calls   []activities.FanInRequest
	items   int // items whose records held the artifact, at the last call
	problem string
	salt    int // added to the digest: other bytes
}

func (f *fanIns) fanIn(_ context.Context, req activities.FanInRequest) (activities.FanInResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, req)
	f.st.mu.Lock()
	f.items = 0
	for _, r := range f.st.rows[req.Wide.Run+"/"+req.Wide.Step] {
		for _, a := range r.Artifacts {
			if a.Name == req.Artifact && *a.Producer.Item == r.Index {
				f.items++
			}
		}
	}
	f.st.mu.Unlock()
	if f.problem != "" {
		return activities.FanInResult{Problem: f.problem}, nil
	}
	return activities.FanInResult{Artifact: runstate.Artifact{
		ID: runstate.ArtifactID(req.Project, req.Wide.Run, req.Wide.Step, nil, req.Artifact), Name: req.Artifact, Type: "dataset",
		Digest: "sha256:" + fmt.Sprintf("%064d", f.items+f.salt), Size: int64(f.items), Files: f.items,
		Producer: runstate.ArtifactProducer{Run: req.Wide.Run, Step: req.Wide.Step},
	}}, nil
}

// storingRuntime is the fake runtime whose steps store every declared
// output artifact (its digest from the item), as the local runtime does.
func storingRuntime(rt *fakeRuntime) func(context.Context, activities.ContainerRequest) (activities.ContainerResult, error) {
	return func(ctx context.Context, req activities.ContainerRequest) (activities.ContainerResult, error) {
		res, err := rt.run(ctx, req)
		if err != nil {
			return res, err
		}
		for _, out := range req.Outputs {
			k := -1
			if req.Item != nil {
				k = *req.Item
			}
			if k == -1 {
				continue // the readers' own outputs: none declared here
			}
			p := runstate.ArtifactProducer{Run: req.RunID, Step: req.Step, Item: req.Item, Attempt: req.Attempt}
			res.Artifacts = append(res.Artifacts, runstate.StoredOutput(req.Project, p, out, fmt.Sprintf("sha256:%064d", k+1), 1, 0))
		}
		return res, nil
	}
}

const wideFanInSpec = `
steps:
  - name: shard
    forEach: {items: "0..1199", parallelism: 200, failurePolicy: {mode: continue, maxFailedPercent: 1}}
    container:
      command: ["{{ item == 5 ? 'fail' : 'ok' }}"]
      artifacts: {outputs: [{name: part}]}
  - name: merge
    cache: {}
    container:
      command: ["ok"]
      artifacts: {inputs: [{name: parts, from: shard.part}]}
  - name: check
    forEach: {items: [1, 2]}
    container:
      command: ["ok"]
      artifacts: {inputs: [{name: all, from: shard.part}]}
`

// runWideFanIn runs wideFanInSpec with f as the fan-in activity and
// returns the status, the runtime and merge's cache key.
func runWideFanIn(t *testing.T, f *fanIns, before ...func(*testsuite.TestWorkflowEnvironment)) (runstate.Status, *fakeRuntime) {
	env, rt, st := newWideEnv(t)
	f.st = st
	env.RegisterActivityWithOptions(f.fanIn, activity.RegisterOptions{Name: activities.FanInName})
	env.RegisterActivityWithOptions(func(context.Context, activities.CacheLookupRequest) (activities.CacheLookupResult, error) {
		return activities.CacheLookupResult{}, nil
	}, activity.RegisterOptions{Name: activities.CacheLookupName})
	env.RegisterActivityWithOptions(func(context.Context, activities.CacheStoreRequest) error { return nil },
		activity.RegisterOptions{Name: activities.CacheStoreName})
	env.OnActivity(activities.RunContainerName, mock.Anything, mock.Anything).Return(storingRuntime(rt))
	for _, b := range before {
		b(env)
	}
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, wideFanInSpec, nil))
	require.True(t, env.IsWorkflowCompleted())
	return status(t, env), rt
}

// A step reading a wide step's artifact gets one directory reference,
// made by the fan-in activity from the items' records (which carry the
// artifacts each item wrote): once per run, whichever steps and items
// read it; its digest is in the reading step's cache key; a problem
// fails the reading step naming its input.
func TestWideFanIn(t *testing.T) {
	f := &fanIns{}
	s, rt := runWideFanIn(t, f)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)
	require.Len(t, f.calls, 1, "one fan-in per run, for merge and both items of check")
	assert.Equal(t, activities.FanInRequest{Project: "p1", Wide: runstate.WideRef{Run: s.RunID, Step: "shard", Items: 1200}, Artifact: "part"}, f.calls[0])
	assert.Equal(t, 1199, f.items, "every item that succeeded recorded its artifact (item 5 failed)")

	merge := wideStep(s, "merge")
	require.Len(t, merge.Inputs, 1)
	in := merge.Inputs[0]
	assert.Equal(t, "parts", in.Name)
	assert.Equal(t, "shard.part", in.From)
	assert.Equal(t, 1199, in.Files)
	assert.Equal(t, runstate.ArtifactProducer{Run: s.RunID, Step: "shard"}, in.Producer)
	var reads int
	for _, c := range rt.calls {
		if c.Step == "check" || c.Step == "merge" {
			require.Len(t, c.Inputs, 1)
			assert.Equal(t, in.Digest, c.Inputs[0].Digest)
			reads++
		}
	}
	assert.Equal(t, 3, reads)
	require.NotEmpty(t, merge.CacheKey)

	// Other items' artifacts: another directory, another cache key.
	s2, _ := runWideFanIn(t, &fanIns{salt: 1})
	require.Equal(t, runstate.Succeeded, s2.State, s2.Error)
	assert.NotEqual(t, merge.CacheKey, wideStep(s2, "merge").CacheKey)

	bad := &fanIns{problem: "the items of step \"shard\" hold more than 1000000 files"}
	s3, _ := runWideFanIn(t, bad)
	require.Equal(t, runstate.Failed, s3.State)
	assert.Equal(t, runstate.StepFailed, wideStep(s3, "merge").State)
	assert.Contains(t, wideStep(s3, "merge").Error, `input artifact "parts": the items of step "shard" hold more than`)

	// A run from before the fan-in replays its refusal, with no activity.
	old := &fanIns{}
	s4, _ := runWideFanIn(t, old, func(env *testsuite.TestWorkflowEnvironment) {
		env.OnGetVersion("atelier.wide-fan-in", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	})
	require.Equal(t, runstate.Failed, s4.State)
	assert.Contains(t, wideStep(s4, "merge").Error, "reading its items' artifacts is not supported yet")
	assert.Empty(t, old.calls)
}
