package integration

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/examples/gopipeline"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// registerChain adds the example.Chain Go pipeline to the stack's worker;
// publishChain lists it in the catalogue as a worker serving it does, so
// that REST can start it by name.
var registerChain = stackOptions{register: func(r worker.Registry) {
	r.RegisterWorkflowWithOptions(gopipeline.Chain, workflow.RegisterOptions{Name: gopipeline.ChainName})
}}

func (s *stack) publishChain() {
	s.t.Helper()
	require.NoError(s.t, s.store.UpsertGoWorkflow(context.Background(), catalog.GoWorkflow{
		Name: gopipeline.ChainName, Description: gopipeline.ChainPipeline.Description, TaskQueue: s.cfg.TaskQueue}))
}

// ranIn reads and clears dir/ran, where example.Chain's steps write their
// names.
func ranIn(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "ran"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ran"), nil, 0o666))
	return strings.Fields(string(b))
}

// Retry from failure of a native Go pipeline, through REST on the real
// stack: example.Chain's 3rd of 5 steps fails; its retry reuses steps 1–2
// (CACHED with their source, nothing runs, s1's output still reaches s5
// through Go code) and runs 3–5 and the exit handler; resumeFrom reruns
// the named step and every step created after it. With
// ATELIER_RECORD_HISTORIES=1 it records v6-go-retry.
func TestGoPipelineRetryOnRealStack(t *testing.T) {
	s := newStack(t, registerChain)
	s.publishChain()
	dir := stepScratchDir(t)

	first := s.startRun(gen.CreateRunRequest{Workflow: ptrTo(gopipeline.ChainName), Input: goInput(t, gopipeline.ChainInput{Dir: dir})})
	r := s.waitTerminal(first, 60*time.Second)
	require.Equal(t, gen.RunStateFAILED, r.State, "%+v", r.Status)
	assert.Equal(t, []string{"s1", "s2", "s3", "exit"}, ranIn(t, dir))

	require.NoError(t, os.WriteFile(filepath.Join(dir, "ok"), nil, 0o666))
	retried := s.retry(first, gen.RetryRunRequest{})
	r = s.waitTerminal(retried, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	assert.Equal(t, gopipeline.ChainName, r.Workflow)
	assert.Equal(t, first, deref2(r.Status.RetryOf))
	assert.Equal(t, 7.0, r.Status.Result)
	assert.Equal(t, []string{"s3", "s4", "s5", "exit"}, ranIn(t, dir), "only the failed step, what follows and the exit handler ran")
	one := 1
	for _, name := range []string{"s1", "s2"} {
		st := stepByName(r, name)
		assert.Equal(t, gen.StepStateCACHED, st.State, name)
		assert.Equal(t, "reused from run "+first+" (step "+name+", attempt 1)", deref2(st.Message))
		assert.Equal(t, &gen.CacheSource{Run: first, Step: name, Attempt: &one}, st.CachedFrom)
		assert.Nil(t, st.Attempts, "a reused step has no attempt")
	}
	assert.Equal(t, map[string]any{"n": 7.0}, stepByName(r, "s1").Outputs)
	assert.Equal(t, gen.StepStateSUCCEEDED, stepByName(r, "report").State)

	// resumeFrom s4: s4, s5 and the exit handler run; s1–s3 are reused,
	// s1 still naming the run that ran it.
	again := s.retry(retried, gen.RetryRunRequest{ResumeFrom: &[]string{"s4"}})
	r = s.waitTerminal(again, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	assert.Equal(t, []string{"s4", "s5", "exit"}, ranIn(t, dir))
	assert.Equal(t, gen.StepStateCACHED, stepByName(r, "s3").State)
	assert.Equal(t, &gen.CacheSource{Run: first, Step: "s1", Attempt: &one}, stepByName(r, "s1").CachedFrom)

	// An unknown step and an exit handler are refused, each named.
	res, err := s.client().RetryRunWithResponse(context.Background(), s.project, first, gen.RetryRunRequest{ResumeFrom: &[]string{"nope", "report"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, res.StatusCode(), "%s", res.Body)
	require.NotNil(t, res.ApplicationproblemJSON400.Errors)
	assert.Len(t, *res.ApplicationproblemJSON400.Errors, 2)

	if os.Getenv("ATELIER_RECORD_HISTORIES") != "" {
		time.Sleep(500 * time.Millisecond) // the final mirror's completion
		recordHistory(t, s, "v6-go-retry", retried)
	}
}
