package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
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

	first := s.start("chain", nil)
	r := s.waitTerminal(first, 60*time.Second)
	require.Equal(t, gen.RunStateFAILED, r.State)
	assert.Equal(t, []string{"s1", "s2", "s3"}, ran())

	require.NoError(t, os.WriteFile(ok, nil, 0o666))

	retried := s.retry(first, gen.RetryRunRequest{})
	r = s.waitTerminal(retried, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	assert.Equal(t, first, val(r.Status.RetryOf))
	assert.Equal(t, []string{"s3", "s4", "s5"}, ran(), "only the failed step and what follows ran")
	for _, name := range []string{"s1", "s2"} {
		st := stepByName(r, name)
		assert.Equal(t, gen.StepStateCACHED, st.State, name)
		assert.Equal(t, "reused from run "+first+" (step "+name+", attempt 1)", val(st.Message))
		assert.Equal(t, &gen.CacheSource{Run: first, Step: name, Attempt: ptrTo(1)}, st.CachedFrom)
		assert.Empty(t, st.Attempts, "a reused step has no attempt")
	}

	// resumeFrom: s4 and what follows run again; s1–s3 are reused.
	again := s.retry(retried, gen.RetryRunRequest{ResumeFrom: &[]string{"s4"}})
	r = s.waitTerminal(again, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State)
	assert.Equal(t, []string{"s4", "s5"}, ran())
	assert.Equal(t, gen.StepStateCACHED, stepByName(r, "s3").State)
	// Reused twice, s1 still names the run that ran it.
	assert.Equal(t, &gen.CacheSource{Run: first, Step: "s1", Attempt: ptrTo(1)}, stepByName(r, "s1").CachedFrom)

	unknown, err := s.client().RetryRunWithResponse(context.Background(), s.project, first, gen.RetryRunRequest{ResumeFrom: &[]string{"nope"}})
	require.NoError(t, err)
	require.Equal(t, 400, unknown.StatusCode(), "%s", unknown.Body)
	require.NotNil(t, unknown.ApplicationproblemJSON400)

	// forEach: items 0 and 1 succeed, item 2 fails (parallelism 1: item 3
	// never runs); the retry reuses 0 and 1 and runs 2 and 3.
	fanOK := filepath.Join(dir, "fan-ok")
	s.createPipeline("fan", fmt.Sprintf(`
steps:
  - name: each
    forEach: {items: [0, 1, 2, 3], parallelism: 1}
    container: {command: ["sh", "-c", "echo item{{ item }} >> %[1]s/ran; test {{ item }} != 2 || test -e %[2]s"]}
`, dir, fanOK))
	fan := s.start("fan", nil)
	require.Equal(t, gen.RunStateFAILED, s.waitTerminal(fan, 60*time.Second).State)
	assert.Equal(t, []string{"item0", "item1", "item2"}, ran())
	require.NoError(t, os.WriteFile(fanOK, nil, 0o666))
	fanRetry := s.retry(fan, gen.RetryRunRequest{})
	r = s.waitTerminal(fanRetry, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	assert.Equal(t, []string{"item2", "item3"}, ran())
	items := val(stepByName(r, "each").Items)
	require.Len(t, items, 4)
	assert.Equal(t, gen.StepStateCACHED, items[0].State)
	assert.Equal(t, &gen.CacheSource{Run: fan, Step: "each", Item: ptrTo(1), Attempt: ptrTo(1)}, items[1].CachedFrom)
	assert.Equal(t, gen.StepStateSUCCEEDED, items[3].State)

	// A run still in flight cannot be retried.
	s.createPipeline("blocking", blockingPipeline(stepScratchDir(t)))
	live := s.start("blocking", nil)
	inFlight, err := s.client().RetryRunWithResponse(context.Background(), s.project, live, gen.RetryRunRequest{})
	require.NoError(t, err)
	require.Equal(t, 409, inFlight.StatusCode(), "%s", inFlight.Body)
	require.NotNil(t, inFlight.ApplicationproblemJSON409)
	s.cancel(live, "")
}
