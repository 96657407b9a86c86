package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/workflows"
)

// Retry from failure, through REST on the real stack:
//   - a run whose 3rd of 5 steps failed is retried: steps 1–2 are reused
//     (CACHED, nothing runs, their outputs still feed templates), 3–5 run;
//   - resumeFrom reruns the named step and everything downstream only;
//   - a forEach whose item failed keeps the items that succeeded;
//   - a running run cannot be retried; an unknown step is a clear error.
func TestRetryFromFailureOnRealStack(t *testing.T) {
	s := newStack(t)
	dir := stepScratchDir(t)
	ok := filepath.Join(dir, "ok")
	step := func(name, extra string) string {
		return fmt.Sprintf(`  - name: %[1]s
    container: {command: ["sh", "-c", "echo %[1]s >> %[2]s/ran; %[3]s"]}
`, name, dir, extra)
	}
	s.createPipeline("chain", "steps:\n"+
		step("s1", `echo '{\"n\": 7}' > $ATELIER_OUTPUTS`)+
		step("s2", "true")+"    dependsOn: [s1]\n"+
		step("s3", "test -e "+ok)+"    dependsOn: [s2]\n"+
		step("s4", "true")+"    dependsOn: [s3]\n"+
		step("s5", `test {{ steps.s1.outputs.n }} = 7`)+"    dependsOn: [s4]\n")
	ran := func() []string {
		b, _ := os.ReadFile(filepath.Join(dir, "ran"))
		out := strings.Fields(string(b))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "ran"), nil, 0o666))
		return out
	}

	first := s.startRun(map[string]any{"pipeline": "chain"})
	r := s.waitTerminal(first, 60*time.Second)
	require.Equal(t, workflows.RunFailed, r.State)
	assert.Equal(t, []string{"s1", "s2", "s3"}, ran())

	var running map[string]any
	require.NoError(t, os.WriteFile(ok, nil, 0o666))

	var retried runView
	require.Equal(t, 201, s.do("POST", s.path("/runs/%s/retry", first), map[string]any{}, &retried))
	r = s.waitTerminal(retried.ID, 60*time.Second)
	require.Equal(t, workflows.RunSucceeded, r.State, "%+v", r.Status)
	assert.Equal(t, first, r.Status.RetryOf)
	assert.Equal(t, []string{"s3", "s4", "s5"}, ran(), "only the failed step and what follows ran")
	for _, name := range []string{"s1", "s2"} {
		st := stepByName(r, name)
		assert.Equal(t, workflows.StepCached, st.State, name)
		assert.Equal(t, "reused from run "+first+" (step "+name+", attempt 1)", st.Message)
		assert.Equal(t, &workflows.CacheSource{Run: first, Step: name, Attempt: 1}, st.CachedFrom)
		assert.Empty(t, st.Attempts, "a reused step has no attempt")
	}

	// resumeFrom: s4 and what follows run again; s1–s3 are reused.
	var again runView
	require.Equal(t, 201, s.do("POST", s.path("/runs/%s/retry", retried.ID), map[string]any{"resumeFrom": []string{"s4"}}, &again))
	r = s.waitTerminal(again.ID, 60*time.Second)
	require.Equal(t, workflows.RunSucceeded, r.State)
	assert.Equal(t, []string{"s4", "s5"}, ran())
	assert.Equal(t, workflows.StepCached, stepByName(r, "s3").State)
	// Reused twice, s1 still names the run that ran it.
	assert.Equal(t, &workflows.CacheSource{Run: first, Step: "s1", Attempt: 1}, stepByName(r, "s1").CachedFrom)

	require.Equal(t, 400, s.do("POST", s.path("/runs/%s/retry", first), map[string]any{"resumeFrom": []string{"nope"}}, &running))

	// forEach: items 0 and 1 succeed, item 2 fails (parallelism 1: item 3
	// never runs); the retry reuses 0 and 1 and runs 2 and 3.
	fanOK := filepath.Join(dir, "fan-ok")
	s.createPipeline("fan", fmt.Sprintf(`
steps:
  - name: each
    forEach: {items: [0, 1, 2, 3], parallelism: 1}
    container: {command: ["sh", "-c", "echo item{{ item }} >> %[1]s/ran; test {{ item }} != 2 || test -e %[2]s"]}
`, dir, fanOK))
	fan := s.startRun(map[string]any{"pipeline": "fan"})
	require.Equal(t, workflows.RunFailed, s.waitTerminal(fan, 60*time.Second).State)
	assert.Equal(t, []string{"item0", "item1", "item2"}, ran())
	require.NoError(t, os.WriteFile(fanOK, nil, 0o666))
	var fanRetry runView
	require.Equal(t, 201, s.do("POST", s.path("/runs/%s/retry", fan), nil, &fanRetry))
	r = s.waitTerminal(fanRetry.ID, 60*time.Second)
	require.Equal(t, workflows.RunSucceeded, r.State, "%+v", r.Status)
	assert.Equal(t, []string{"item2", "item3"}, ran())
	each := stepByName(r, "each")
	require.Len(t, each.Items, 4)
	assert.Equal(t, workflows.StepCached, each.Items[0].State)
	one := 1
	assert.Equal(t, &workflows.CacheSource{Run: fan, Step: "each", Item: &one, Attempt: 1}, each.Items[1].CachedFrom)
	assert.Equal(t, workflows.StepSucceeded, each.Items[3].State)

	// A run still in flight cannot be retried.
	s.createPipeline("blocking", blockingPipeline(stepScratchDir(t)))
	live := s.startRun(map[string]any{"pipeline": "blocking"})
	require.Equal(t, 409, s.do("POST", s.path("/runs/%s/retry", live), nil, nil))
	require.Equal(t, 202, s.do("POST", s.path("/runs/%s/cancel", live), nil, nil))
}
