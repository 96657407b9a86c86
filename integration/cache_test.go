package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// cachedPipelineYAML appends a line per execution to dir/ran: prepare and
// each train item are cached, report is not. LR reaches train's rendered
// env, so changing it changes train's key and not prepare's.
func cachedPipelineYAML(dir string) string {
	return fmt.Sprintf(`
params:
  - {name: lr, type: number, default: 0.1}
steps:
  - name: prepare
    cache: {version: "1", ttl: 1h}
    container:
      command: [sh, -c, 'echo prepare >> %[1]s/ran; printf "{\"rows\": 150}" > "$ATELIER_OUTPUTS"']
  - name: train
    cache: {}
    forEach: {items: [1, 2], parallelism: 1}
    container:
      command: [sh, -c, 'echo "train $ITEM $LR" >> %[1]s/ran; printf "{\"acc\": 0.9}" > "$ATELIER_OUTPUTS"']
      env: {ITEM: "{{ item }}", LR: "{{ params.lr }}", ROWS: "{{ steps.prepare.outputs.rows }}"}
  - name: report
    container:
      command: [sh, -c, 'echo "report $ACC" >> %[1]s/ran']
      env: {ACC: "{{ steps.train.outputs[0].acc }}"}
`, dir)
}

// The step cache on the real stack, through the generated client: an
// identical run reuses every cached step (CACHED, naming run, step,
// attempt; nothing runs), a changed env misses; another project never
// hits; entries are listed and evicted over REST; a bypassing run runs
// everything and refreshes the entries; the Temporal UI's details show
// the hit.
func TestStepCacheAcrossRuns(t *testing.T) {
	s := newStack(t)
	dir := stepScratchDir(t)
	ctx := context.Background()
	c := s.client()
	ran := func() []string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "ran"))
		if os.IsNotExist(err) {
			return nil
		}
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "ran"), nil, 0o666))
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	push := func(c *gen.ClientWithResponses, project string) {
		t.Helper()
		res, err := c.CreatePipelineVersionWithBodyWithResponse(ctx, project, "cached", "application/yaml", bytes.NewReader([]byte(cachedPipelineYAML(dir))))
		require.NoError(t, err)
		require.Contains(t, []int{200, 201}, res.StatusCode(), string(res.Body))
	}
	start := func(c *gen.ClientWithResponses, project string, params map[string]any, bypass bool) gen.Run {
		t.Helper()
		body := gen.CreateRunRequest{Pipeline: ptrTo("cached")}
		if params != nil {
			body.Params = &params
		}
		if bypass {
			body.Cache = &gen.RunCacheOptions{Bypass: &bypass}
		}
		res, err := c.CreateRunWithResponse(ctx, project, nil, body)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
		var run gen.Run
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			got, err := c.GetRunWithResponse(ctx, project, res.JSON201.Id)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, got.StatusCode(), string(got.Body))
			run = *got.JSON200
			if run.Status != nil && (run.State == gen.RunStateSUCCEEDED || run.State == gen.RunStateFAILED) {
				require.Equal(t, gen.RunStateSUCCEEDED, run.State, "%+v", run.Status)
				return run
			}
		}
		t.Fatalf("run %s did not end: %+v", run.Id, run.Status)
		return run
	}
	step := func(r gen.Run, name string) gen.StepStatus {
		t.Helper()
		for _, st := range r.Status.Steps {
			if st.Name == name {
				return st
			}
		}
		t.Fatalf("no step %s in run %s", name, r.Id)
		return gen.StepStatus{}
	}
	push(c, s.project)

	first := start(c, s.project, nil, false)
	assert.Equal(t, []string{"prepare", "train 1 0.1", "train 2 0.1", "report 0.9"}, ran())
	prepKey := val(step(first, "prepare").CacheKey)
	require.Len(t, prepKey, 64)

	// Identical: only report runs; the others name where they come from.
	second := start(c, s.project, nil, false)
	assert.Equal(t, []string{"report 0.9"}, ran(), "cached steps ran nothing")
	prep := step(second, "prepare")
	assert.Equal(t, gen.StepStateCACHED, prep.State)
	require.NotNil(t, prep.CachedFrom)
	assert.Equal(t, first.Id, prep.CachedFrom.Run)
	assert.Equal(t, "prepare", prep.CachedFrom.Step)
	assert.Equal(t, 1, val(prep.CachedFrom.Attempt))
	assert.NotNil(t, prep.CachedFrom.At)
	assert.Equal(t, fmt.Sprintf("reused from run %s (step prepare, attempt 1)", first.Id), val(prep.Message))
	assert.Nil(t, prep.Attempts, "a hit has no attempt")
	train := step(second, "train")
	assert.Equal(t, gen.StepStateCACHED, train.State, "every item hit")
	require.Len(t, *train.Items, 2)
	assert.Equal(t, 1, val((*train.Items)[1].CachedFrom.Item))
	assert.Equal(t, gen.StepStateSUCCEEDED, step(second, "report").State)

	// What the Temporal UI shows: the details table has the hit and its source.
	details := temporalCLI(t, s, "workflow", "metadata", "--workflow-id", second.Id)
	assert.Contains(t, details, "| prepare | container | CACHED | 0 |", "details:\n%s", details)
	assert.Contains(t, details, "reused from run "+first.Id)

	// A changed env: train misses (each item), prepare still hits.
	third := start(c, s.project, map[string]any{"lr": 0.2}, false)
	assert.Equal(t, []string{"train 1 0.2", "train 2 0.2", "report 0.9"}, ran())
	assert.Equal(t, gen.StepStateCACHED, step(third, "prepare").State)
	assert.Equal(t, gen.StepStateSUCCEEDED, step(third, "train").State)

	// Another project never hits team-a's entries, nor reads them.
	other := s.asProject("team-b")
	oc := other.client()
	push(oc, other.project)
	start(oc, other.project, nil, false)
	assert.Equal(t, []string{"prepare", "train 1 0.1", "train 2 0.1", "report 0.9"}, ran(), "team-b runs everything")
	res, err := oc.ListCacheEntriesWithResponse(ctx, s.project, nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusNotFound, res.StatusCode(), "team-b's token reads team-a's cache")
	ev, err := oc.EvictCacheEntryWithResponse(ctx, s.project, prepKey)
	require.NoError(t, err)
	assert.Equal(t, http.StatusNotFound, ev.StatusCode())

	// Listing: prepare once, train four times (two items for each lr).
	list, err := c.ListCacheEntriesWithResponse(ctx, s.project, &gen.ListCacheEntriesParams{Pipeline: ptrTo("cached")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, list.StatusCode(), string(list.Body))
	assert.Len(t, list.JSON200.Entries, 5)
	list, err = c.ListCacheEntriesWithResponse(ctx, s.project, &gen.ListCacheEntriesParams{Step: ptrTo("prepare")})
	require.NoError(t, err)
	require.Len(t, list.JSON200.Entries, 1)
	e := list.JSON200.Entries[0]
	assert.Equal(t, prepKey, e.Key)
	assert.Equal(t, first.Id, e.RunId)
	assert.Equal(t, map[string]any{"rows": 150.0}, e.Outputs)
	require.NotNil(t, e.ExpiresAt, "prepare has a ttl")
	assert.WithinDuration(t, e.CreatedAt.Add(time.Hour), *e.ExpiresAt, time.Second)

	// Evicting prepare: the next run runs it again, train still hits.
	evicted, err := c.EvictCacheEntriesWithResponse(ctx, s.project, &gen.EvictCacheEntriesParams{Pipeline: ptrTo("cached"), Step: ptrTo("prepare")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, evicted.StatusCode(), string(evicted.Body))
	assert.Equal(t, int64(1), evicted.JSON200.Evicted)
	fourth := start(c, s.project, nil, false)
	assert.Equal(t, []string{"prepare", "report 0.9"}, ran())
	assert.Equal(t, gen.StepStateCACHED, step(fourth, "train").State)

	// Bypass: everything runs, and its results become the entries.
	bypass := start(c, s.project, nil, true)
	assert.Equal(t, []string{"prepare", "train 1 0.1", "train 2 0.1", "report 0.9"}, ran())
	assert.True(t, val(bypass.Status.CacheBypass))
	after := start(c, s.project, nil, false)
	assert.Equal(t, []string{"report 0.9"}, ran())
	assert.Equal(t, bypass.Id, step(after, "prepare").CachedFrom.Run)
	assert.Equal(t, bypass.Id, (*step(after, "train").Items)[0].CachedFrom.Run)

	// The same through the CLI: run --no-cache, cache list, cache evict.
	config := filepath.Join(t.TempDir(), "config.yaml")
	cli := func(args ...string) cliResult { return atelierCLI(t, config, args...) }
	r := cli("login", s.url, "--token", s.token, "--project", s.project)
	require.Equal(t, 0, r.code, r.stderr)
	r = cli("run", "cached", "--no-cache", "--watch")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, []string{"prepare", "train 1 0.1", "train 2 0.1", "report 0.9"}, ran())
	r = cli("cache", "list", "--step", "prepare")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, prepKey, "the table shows the whole key, which evict takes")
	r = cli("cache", "evict")
	assert.Equal(t, 1, r.code, "evicting without saying what is refused")
	r = cli("cache", "evict", prepKey)
	require.Equal(t, 0, r.code, r.stderr)
	r = cli("cache", "evict", "--all")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "evicted 4 entries", "the train items of both learning rates")
	r = cli("run", "cached", "--watch")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Len(t, ran(), 4, "after evicting everything, everything runs")
}
