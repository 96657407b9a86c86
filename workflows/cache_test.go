package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities/stepcache"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// memCache is an in-memory catalogue step cache (the Postgres one is
// tested in internal/store); fail makes every call fail.
type memCache struct {
	mu      sync.Mutex
	entries map[string]catalog.CacheEntry // project + "/" + key
	lookups int
	fail    error
}

func (m *memCache) LookupStepCache(_ context.Context, project, key string, now time.Time, maxAge time.Duration) (catalog.CacheEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lookups++
	if m.fail != nil {
		return catalog.CacheEntry{}, m.fail
	}
	e, ok := m.entries[project+"/"+key]
	if !ok || (e.ExpiresAt != nil && !e.ExpiresAt.After(now)) || (maxAge > 0 && e.CreatedAt.Before(now.Add(-maxAge))) {
		return catalog.CacheEntry{}, catalog.ErrNotFound
	}
	return e, nil
}

func (m *memCache) PutStepCache(_ context.Context, e catalog.CacheEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	if m.entries == nil {
		m.entries = map[string]catalog.CacheEntry{}
	}
	m.entries[e.Project+"/"+e.Key] = e
	return nil
}

func (m *memCache) steps() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for _, e := range m.entries {
		out[e.Step]++
	}
	return out
}

// runCached runs in as run id against cache and returns its status and
// the commands that ran.
func runCached(t *testing.T, cache *memCache, id string, in workflows.PipelineInput) (runstate.Status, []string, error) {
	t.Helper()
	env, rt, _ := newEnv(t)
	stepcache.New(cache, time.Now).Register(env)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id})
	in.RunID = id
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	return status(t, env), rt.commands(), env.GetWorkflowError()
}

const cachedPipeline = `
params:
  - {name: lr, type: number, default: 0.1}
steps:
  - name: prepare
    cache: {version: "1"}
    container: {command: ["ok rows=150"]}
  - name: train
    cache: {}
    container:
      command: ["ok acc=0.9"]
      env: {LR: "{{ params.lr }}", ROWS: "{{ steps.prepare.outputs.rows }}"}
  - name: report
    container: {command: ["ok acc={{ steps.train.outputs.acc }}"]}
`

func TestStepCacheHitAfterAnIdenticalRunMissAfterAChangedEnv(t *testing.T) {
	cache := &memCache{}
	first, ran, err := runCached(t, cache, "run-1", input(t, cachedPipeline, nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"ok rows=150", "ok acc=0.9", "ok acc=0.9"}, ran)
	assert.Equal(t, map[string]int{"prepare": 1, "train": 1}, cache.steps(), "only cached steps are stored")
	require.NotEmpty(t, first.Steps[0].CacheKey)
	assert.Empty(t, first.Steps[2].CacheKey, "report does not cache")

	second, ran, err := runCached(t, cache, "run-2", input(t, cachedPipeline, nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"ok acc=0.9"}, ran, "only the uncached step runs")
	assert.Equal(t, map[string]runstate.StepState{"prepare": runstate.StepCached, "train": runstate.StepCached, "report": runstate.StepSucceeded}, stepStates(second))
	train := second.Steps[1]
	require.NotNil(t, train.CachedFrom)
	assert.Equal(t, "run-1", train.CachedFrom.Run)
	assert.Equal(t, "train", train.CachedFrom.Step)
	assert.Equal(t, 1, train.CachedFrom.Attempt)
	assert.NotNil(t, train.CachedFrom.At)
	assert.Equal(t, "reused from run run-1 (step train, attempt 1)", train.Message)
	assert.Empty(t, train.Attempts, "nothing ran")
	assert.Equal(t, map[string]any{"acc": 0.9}, train.Outputs, "a hit's outputs feed later steps")
	assert.Equal(t, first.Steps[1].CacheKey, train.CacheKey)

	// lr is in train's rendered env: train misses, prepare still hits.
	third, ran, err := runCached(t, cache, "run-3", input(t, cachedPipeline, map[string]any{"lr": 0.2}))
	require.NoError(t, err)
	assert.Equal(t, []string{"ok acc=0.9", "ok acc=0.9"}, ran)
	assert.Equal(t, runstate.StepCached, third.Steps[0].State)
	assert.Equal(t, runstate.StepSucceeded, third.Steps[1].State)
	assert.NotEqual(t, first.Steps[1].CacheKey, third.Steps[1].CacheKey)

	// Another project never sees these entries.
	in := input(t, cachedPipeline, nil)
	in.Project = "p2"
	other, ran, err := runCached(t, cache, "run-4", in)
	require.NoError(t, err)
	assert.Len(t, ran, 3, "project p2 runs everything")
	assert.Equal(t, runstate.StepSucceeded, other.Steps[0].State)
}

func TestStepCacheForEachIsPerItem(t *testing.T) {
	cache := &memCache{}
	spec := func(items string) string {
		return `
steps:
  - name: fan
    cache: {}
    forEach: {items: ` + items + `}
    container: {command: ["ok v={{ item }}"]}
`
	}
	_, ran, err := runCached(t, cache, "run-1", input(t, spec("[1, 2]"), nil))
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"ok v=1", "ok v=2"}, ran)

	s, ran, err := runCached(t, cache, "run-2", input(t, spec("[1, 2, 3]"), nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"ok v=3"}, ran, "only the new item runs")
	fan := s.Steps[0]
	assert.Equal(t, runstate.StepSucceeded, fan.State)
	assert.Equal(t, runstate.StepCached, fan.Items[0].State)
	require.NotNil(t, fan.Items[1].CachedFrom)
	assert.Equal(t, 1, *fan.Items[1].CachedFrom.Item)
	assert.Equal(t, []any{map[string]any{"v": 1.0}, map[string]any{"v": 2.0}, map[string]any{"v": 3.0}}, fan.Outputs)

	// Every item a hit: the step reads CACHED too.
	s, ran, err = runCached(t, cache, "run-3", input(t, spec("[3, 1]"), nil))
	require.NoError(t, err)
	assert.Empty(t, ran)
	assert.Equal(t, runstate.StepCached, s.Steps[0].State)
	assert.Equal(t, "run-2", s.Steps[0].Items[0].CachedFrom.Run, "item 3 came from run-2, whatever its index now")
}

func TestStepCacheStoresOnlySuccess(t *testing.T) {
	cache := &memCache{}
	yaml := `
steps:
  - name: flaky
    cache: {}
    retries: {limit: 1, backoff: 1s}
    container: {command: ["flaky x"]}
  - name: broken
    cache: {}
    container: {command: ["fail"]}
`
	s, _, err := runCached(t, cache, "run-1", input(t, yaml, nil))
	require.Error(t, err)
	assert.Equal(t, map[string]int{"flaky": 1}, cache.steps(), "a failed step is never stored")
	for _, e := range cache.entries {
		assert.Equal(t, 2, e.Attempt, "the successful attempt is the source")
	}
	assert.Equal(t, runstate.StepFailed, s.Steps[1].State)

	// The failed step runs again in the next run.
	_, ran, _ := runCached(t, cache, "run-2", input(t, yaml, nil))
	assert.Equal(t, []string{"fail"}, ran)
}

func TestStepCacheBypassRunsAndRefreshes(t *testing.T) {
	cache := &memCache{}
	_, _, err := runCached(t, cache, "run-1", input(t, cachedPipeline, nil))
	require.NoError(t, err)
	lookups := cache.lookups
	in := input(t, cachedPipeline, nil)
	in.Cache = &workflows.RunCache{Bypass: true}
	s, ran, err := runCached(t, cache, "run-2", in)
	require.NoError(t, err)
	assert.Len(t, ran, 3)
	assert.True(t, s.CacheBypass)
	assert.Equal(t, lookups, cache.lookups, "a bypassing run looks nothing up")
	for _, e := range cache.entries {
		assert.Equal(t, "run-2", e.RunID, "its results replace the entries")
	}
}

func TestStepCacheCostsNothingWithoutCaching(t *testing.T) {
	cache := &memCache{}
	_, _, err := runCached(t, cache, "run-1", input(t, `
steps:
  - name: a
    container: {command: ["ok"]}
`, nil))
	require.NoError(t, err)
	assert.Zero(t, cache.lookups)
	assert.Empty(t, cache.steps())
}

func TestStepCacheFailureRunsTheStep(t *testing.T) {
	cache := &memCache{fail: errors.New("connection refused")}
	s, ran, err := runCached(t, cache, "run-1", input(t, cachedPipeline, nil))
	require.NoError(t, err, "a cache that fails never fails the run")
	assert.Len(t, ran, 3)
	assert.Equal(t, runstate.Succeeded, s.State)
	joined := strings.Join(s.Warnings, "\n")
	assert.Contains(t, joined, "step cache lookup failed")
	assert.Contains(t, joined, "storing a step's result in the cache failed")
}

func TestStepCacheTTL(t *testing.T) {
	cache := &memCache{}
	yaml := `
steps:
  - name: a
    cache: {ttl: 1h}
    container: {command: ["ok"]}
`
	_, _, err := runCached(t, cache, "run-1", input(t, yaml, nil))
	require.NoError(t, err)
	for k, e := range cache.entries {
		require.NotNil(t, e.ExpiresAt)
		assert.WithinDuration(t, e.CreatedAt.Add(time.Hour), *e.ExpiresAt, time.Second)
		past := time.Now().Add(-time.Second)
		e.ExpiresAt = &past
		cache.entries[k] = e
	}
	s, ran, err := runCached(t, cache, "run-2", input(t, yaml, nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"ok"}, ran, "an expired entry is a miss")
	assert.Equal(t, runstate.StepSucceeded, s.Steps[0].State)
}

// Ray and spark steps (and a ray step on a shared RayCluster) cache like
// container steps: a hit selects no cluster, creates no object and, for a
// shared cluster, does not even ensure it.
func TestStepCacheRaySpark(t *testing.T) {
	cache := &memCache{}
	in := kubeInput(t, `
rayClusters:
  - name: shared
    image: rayproject/ray@sha256:0123
cache: {ttl: 24h}
steps:
  - name: etl
    kind: spark
    spark: {type: Python, image: spark:3.5.0, mainApplicationFile: "local:///etl.py"}
  - name: train
    kind: ray
    dependsOn: [etl]
    ray: {entrypoint: python train.py, image: rayproject/ray:2.9.0}
  - name: eval
    kind: ray
    dependsOn: [train]
    ray: {entrypoint: python eval.py, cluster: shared}
`)
	run := func(id string) (runstate.Status, []string) {
		env, _, _ := newEnv(t)
		fc := &fakeClusters{}
		fc.register(env)
		stepcache.New(cache, time.Now).Register(env)
		env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id})
		env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
		require.True(t, env.IsWorkflowCompleted())
		require.NoError(t, env.GetWorkflowError())
		return status(t, env), fc.calls
	}
	first, calls := run("run-1")
	assert.Len(t, calls, 8, "three selections, ensure, three steps, cleanup: %v", calls)
	assert.Equal(t, map[string]int{"etl": 1, "train": 1, "eval": 1}, cache.steps())
	joined := strings.Join(first.Warnings, "\n")
	assert.Contains(t, joined, `image "spark:3.5.0" is named by a tag`)
	assert.NotContains(t, joined, "rayproject/ray@sha256", "a digest-pinned image does not warn")

	second, calls := run("run-2")
	assert.Empty(t, calls, "nothing reached a cluster")
	for _, st := range second.Steps {
		assert.Equal(t, runstate.StepCached, st.State, st.Name)
		assert.Equal(t, "run-1", st.CachedFrom.Run)
		assert.Equal(t, map[string]any{"ok": true}, st.Outputs)
	}
}

// goCachedPipeline caches one of its two container steps; its input says
// whether the run bypasses the cache.
func goCachedPipeline(ctx workflow.Context, bypass bool) (string, error) {
	run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{Project: "p1", CacheBypass: bypass})
	if err != nil {
		return "", err
	}
	out, err := run.Container(ctx, "prepare", pipeline.Container{Command: []string{"ok rows=7"}}, workflows.WithCache(&pipeline.Cache{Version: "1"})).Get(ctx)
	if err == nil {
		_, err = run.Container(ctx, "report", pipeline.Container{Command: []string{fmt.Sprintf("ok rows=%v", out["rows"])}}).Get(ctx)
	}
	return "", run.End(nil, err)
}

// Go pipelines cache with WithCache and bypass with RunOptions.CacheBypass.
func TestStepCacheGoPipeline(t *testing.T) {
	cache := &memCache{}
	run := func(id string, bypass bool) (runstate.Status, []string) {
		env, rt, _ := newEnv(t)
		stepcache.New(cache, time.Now).Register(env)
		env.RegisterWorkflowWithOptions(goCachedPipeline, workflow.RegisterOptions{Name: "test.GoCached"})
		env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id})
		env.ExecuteWorkflow("test.GoCached", bypass)
		require.True(t, env.IsWorkflowCompleted())
		require.NoError(t, env.GetWorkflowError())
		return status(t, env), rt.commands()
	}
	_, ran := run("go-1", false)
	assert.Equal(t, []string{"ok rows=7", "ok rows=7"}, ran)
	s, ran := run("go-2", false)
	assert.Equal(t, []string{"ok rows=7"}, ran, "prepare hit; report is not cached")
	assert.Equal(t, runstate.StepCached, s.Steps[0].State)
	assert.Equal(t, "go-1", s.Steps[0].CachedFrom.Run)
	for _, e := range cache.entries {
		assert.Equal(t, "test.GoCached", e.Pipeline, "a Go pipeline's entries carry its workflow type")
	}
	_, ran = run("go-3", true)
	assert.Len(t, ran, 2, "bypass runs prepare")
}
