package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/local"
	"github.com/atelier-ml/atelier/activities/stepcache"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// discardLogs is a LogSink that keeps nothing.
type discardLogs struct{}

func (discardLogs) AppendLog(context.Context, activities.LogKey, int64, []byte) error { return nil }

// localChildEnv is newChildEnv with the real local runtime: steps run as
// processes and move their artifacts through a directory store, and
// their cache entries go to cache.
type localChildEnv struct {
	env   *testsuite.TestWorkflowEnvironment
	cat   *fakeCatalogue
	store *artifactstore.Store
	mu    sync.Mutex
	runs  map[string]runstate.Status // the last mirrored status of each run
}

func newLocalChildEnv(t *testing.T, store *artifactstore.Store, cat *fakeCatalogue, cache *memCache, id string) *localChildEnv {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	e := &localChildEnv{env: s.NewTestWorkflowEnvironment(), cat: cat, store: store, runs: map[string]runstate.Status{}}
	e.env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id})
	e.env.SetTestTimeout(2 * time.Minute)
	runner := local.New(discardLogs{}, local.WithDataDir(t.TempDir()), local.WithArtifacts(store), local.WithHeartbeatInterval(200*time.Millisecond))
	runner.Register(e.env)
	e.env.RegisterActivityWithOptions(func(_ context.Context, st runstate.Status) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		if st.Seq >= e.runs[st.RunID].Seq {
			e.runs[st.RunID] = st
		}
		return nil
	}, activity.RegisterOptions{Name: activities.MirrorRunName})
	e.env.RegisterActivityWithOptions(cat.resolve, activity.RegisterOptions{Name: activities.ResolvePipelineName})
	stepcache.New(cache, time.Now).Register(e.env)
	workflows.Register(e.env)
	return e
}

func (e *localChildEnv) run(t *testing.T, in workflows.PipelineInput) runstate.Status {
	t.Helper()
	e.env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, e.env.IsWorkflowCompleted())
	require.NoError(t, e.env.GetWorkflowError())
	return status(t, e.env)
}

// The child pipeline trains: its fit step writes a model file, which the
// pipeline exports as "trained".
const exportingChild = `
params: [{name: weights, type: string, default: w1}]
steps:
  - name: fit
    container:
      command: [sh, -c, 'printf "%s" "$W" > "$ATELIER_ARTIFACTS/model.bin"']
      env: {W: "{{ params.weights }}"}
      artifacts:
        outputs: [{name: model, path: model.bin, type: model}]
artifacts:
  - {name: trained, from: fit.model}
`

// A pipeline step hands its parent the artifacts its child pipeline
// exports, on the local runtime: the parent's step reads one with
// from: "<pipelineStep>.<exported>" exactly as it reads a container
// step's output ($ATELIER_INPUTS/<name>); a forEach of pipeline steps
// gives a directory of each child's. The references are the child's (its
// step is the producer; nothing is copied), and the consumer's cache key
// covers their digests like any input's.
func TestPipelineStepHandsOnChildArtifacts(t *testing.T) {
	store, err := artifactstore.Open(t.Context(), "file://"+t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	cat := &fakeCatalogue{}
	cat.add(t, "p1", "trainer", exportingChild)
	cache := &memCache{}
	parent := `
params: [{name: weights, type: string, default: w1}]
steps:
  - name: train
    kind: pipeline
    pipeline: {name: trainer, params: {weights: "{{ params.weights }}"}}
  - name: evaluate
    cache: {}
    container:
      command: [sh, -c, 'printf "{\"read\": \"%s\"}" "$(cat "$ATELIER_INPUTS/model")" > "$ATELIER_OUTPUTS"']
      artifacts:
        inputs: [{name: model, from: train.trained}]
`
	runParent := func(id, weights string) (runstate.Status, *localChildEnv) {
		e := newLocalChildEnv(t, store, cat, cache, id)
		in := input(t, parent, map[string]any{"weights": weights})
		in.RunID = id
		return e.run(t, in), e
	}

	s, e := runParent("run-1", "w1")
	assert.Equal(t, runstate.Succeeded, s.State)
	train, eval := s.Steps[0], s.Steps[1]
	require.Len(t, train.Artifacts, 1, "the pipeline step carries the child's export")
	art := train.Artifacts[0]
	childRun := "run-1.train.a1"
	assert.Equal(t, "trained", art.Name, "under the exported name")
	assert.Equal(t, "fit.model", art.From, "from the child's step output")
	assert.Equal(t, runstate.ArtifactProducer{Run: childRun, Step: "fit", Attempt: 1}, art.Producer, "the child's step made it")
	assert.Equal(t, runstate.ArtifactID("p1", childRun, "fit", nil, "model"), art.ID, "the child's artifact, not a copy")
	assert.Equal(t, "model", art.Type)
	assert.Equal(t, int64(2), art.Size)

	child := e.runs[childRun]
	require.Len(t, child.Steps, 1)
	require.Len(t, child.Steps[0].Artifacts, 1)
	assert.Equal(t, art.ID, child.Steps[0].Artifacts[0].ID)
	assert.Equal(t, art.Digest, child.Steps[0].Artifacts[0].Digest)
	assert.Empty(t, child.Warnings)

	assert.Equal(t, runstate.StepSucceeded, eval.State)
	assert.Equal(t, map[string]any{"read": "w1"}, eval.Outputs, "the bytes the child wrote reached the parent's step")
	require.Len(t, eval.Inputs, 1)
	assert.Equal(t, art.ID, eval.Inputs[0].ID, "the consumer records the child's artifact (lineage)")
	assert.Equal(t, art.Digest, eval.Inputs[0].Digest)
	assert.Equal(t, "model", eval.Inputs[0].Name)
	assert.Equal(t, "train.trained", eval.Inputs[0].From)
	require.NotEmpty(t, eval.CacheKey)

	// Same bytes from a new child run: the consumer is reused. Other
	// bytes: a new key, and it runs on them.
	s2, _ := runParent("run-2", "w1")
	assert.Equal(t, runstate.StepCached, s2.Steps[1].State, "same digest, same key")
	assert.Equal(t, eval.CacheKey, s2.Steps[1].CacheKey)
	assert.NotEqual(t, art.ID, s2.Steps[0].Artifacts[0].ID, "a new child run's artifact")
	s3, _ := runParent("run-3", "w22")
	assert.Equal(t, runstate.StepSucceeded, s3.Steps[1].State)
	assert.NotEqual(t, eval.CacheKey, s3.Steps[1].CacheKey, "the key covers the input's digest")
	assert.Equal(t, map[string]any{"read": "w22"}, s3.Steps[1].Outputs)
}

// A forEach of pipeline steps: the consumer gets a directory holding each
// child run's export under the item's index.
func TestForEachPipelineStepHandsOnEveryChildsArtifact(t *testing.T) {
	store, err := artifactstore.Open(t.Context(), "file://"+t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	cat := &fakeCatalogue{}
	cat.add(t, "p1", "trainer", exportingChild)
	e := newLocalChildEnv(t, store, cat, &memCache{}, "run-1")
	s := e.run(t, input(t, `
steps:
  - name: sweep
    kind: pipeline
    forEach: {items: [a, b]}
    pipeline: {name: trainer, params: {weights: "{{ item }}"}}
  - name: pick
    container:
      command: [sh, -c, 'printf "{\"all\": \"%s%s\"}" "$(cat "$ATELIER_INPUTS/models/0")" "$(cat "$ATELIER_INPUTS/models/1")" > "$ATELIER_OUTPUTS"']
      artifacts:
        inputs: [{name: models, from: sweep.trained}]
`, nil))
	assert.Equal(t, runstate.Succeeded, s.State)
	assert.Equal(t, map[string]any{"all": "ab"}, s.Steps[1].Outputs)
	require.Len(t, s.Steps[1].Inputs, 2)
	assert.Equal(t, "sweep[1].trained", s.Steps[1].Inputs[1].From)
	assert.Equal(t, runstate.ArtifactProducer{Run: "run-1.sweep.i1.a1", Step: "fit", Attempt: 1}, s.Steps[1].Inputs[1].Producer)
}

// What the child run does not export fails the step that reads it, at
// run time (the child is stored apart, and its newest version is chosen
// when the step starts), naming the child pipeline, its run and what it
// exports; an export whose step wrote nothing is a warning on the child.
func TestReadingAnArtifactTheChildDoesNotExportFails(t *testing.T) {
	env, rt, cat, last := newChildEnv(t)
	cat.add(t, "p1", "plain", `steps: [{name: fit, container: {command: [ok]}}]`)
	cat.add(t, "p1", "skipper", `
steps:
  - {name: fit, when: "false", container: {command: [ok], artifacts: {outputs: [{name: model}]}}}
  - {name: other, container: {command: [ok]}}
artifacts: [{name: model, from: fit.model}]
`)
	in := input(t, `
steps:
  - {name: train, kind: pipeline, pipeline: {name: plain}}
  - {name: train2, kind: pipeline, pipeline: {name: skipper}}
  - name: evaluate
    continueOn: failed
    container:
      command: [ok]
      artifacts: {inputs: [{name: m, from: train.model}]}
  - name: evaluate2
    continueOn: failed
    container:
      command: [ok]
      artifacts: {inputs: [{name: m, from: train2.model}]}
  - {name: promote, kind: promote, continueOn: failed, promote: {model: m, alias: champion, from: train2.model}}
`, nil)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Succeeded, s.State, "continueOn: failed")
	eval, eval2, promote := s.Steps[2], s.Steps[3], s.Steps[4]
	assert.Equal(t, runstate.StepFailed, eval.State)
	assert.Contains(t, eval.Error, `input artifact "m": step "train" runs pipeline "plain" version 1 (child run run-1.train.a1), which exports no artifact "model" (it exports none`)
	assert.Equal(t, runstate.StepFailed, eval2.State)
	assert.Contains(t, eval2.Error, `step "train2" runs pipeline "skipper" version 1 (child run run-1.train2.a1), which exports no artifact "model"`)
	assert.Contains(t, eval2.Error, "see the child run's warnings")
	assert.Equal(t, runstate.StepFailed, promote.State)
	assert.Contains(t, promote.Error, `from "train2.model": step "train2" runs pipeline "skipper"`)
	assert.Len(t, rt.commands(), 2, "only the children's steps ran")

	child := last()["run-1.train2.a1"]
	assert.Equal(t, runstate.Succeeded, child.State)
	assert.Equal(t, []string{`exported artifact "model": step "fit" (SKIPPED) has no artifact "model", so this run does not export it`}, child.Warnings)
}
