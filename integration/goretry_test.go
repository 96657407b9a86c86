package integration

import (
	"context"
	"encoding/json"
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

// startGo starts a Go pipeline run by name through the generated client.
func (s *stack) startGo(workflow string, input any) string {
	s.t.Helper()
	b, err := json.Marshal(input)
	require.NoError(s.t, err)
	raw := json.RawMessage(b)
	res, err := s.client().CreateRunWithResponse(context.Background(), s.project, nil, gen.CreateRunRequest{Workflow: &workflow, Input: &raw})
	require.NoError(s.t, err)
	require.Equal(s.t, http.StatusCreated, res.StatusCode(), "%s", res.Body)
	return res.JSON201.Id
}

// retry retries a run through the generated client and returns the new
// run's ID.
func (s *stack) retry(id string, resumeFrom ...string) string {
	s.t.Helper()
	body := gen.RetryRunRequest{}
	if resumeFrom != nil {
		body.ResumeFrom = &resumeFrom
	}
	res, err := s.client().RetryRunWithResponse(context.Background(), s.project, id, body)
	require.NoError(s.t, err)
	require.Equal(s.t, http.StatusCreated, res.StatusCode(), "%s", res.Body)
	return res.JSON201.Id
}

// ended waits through the generated client until the run has ended (a
// run a schedule started is 404 until its first mirror write).
func (s *stack) ended(id string, d time.Duration) gen.Run {
	s.t.Helper()
	var last *gen.Run
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		res, err := s.client().GetRunWithResponse(context.Background(), s.project, id)
		require.NoError(s.t, err)
		if res.StatusCode() == http.StatusNotFound {
			continue
		}
		require.Equal(s.t, http.StatusOK, res.StatusCode(), "%s", res.Body)
		last = res.JSON200
		switch last.State {
		case gen.RunStateSUCCEEDED, gen.RunStateFAILED, gen.RunStateCANCELLED, gen.RunStateTERMINATED:
			return *last
		}
	}
	s.t.Fatalf("run %s did not end within %s: %+v", id, d, last)
	return gen.Run{}
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

	first := s.startGo(gopipeline.ChainName, gopipeline.ChainInput{Dir: dir})
	r := s.ended(first, 60*time.Second)
	require.Equal(t, gen.RunStateFAILED, r.State, "%+v", r.Status)
	assert.Equal(t, []string{"s1", "s2", "s3", "exit"}, ranIn(t, dir))

	require.NoError(t, os.WriteFile(filepath.Join(dir, "ok"), nil, 0o666))
	retried := s.retry(first)
	r = s.ended(retried, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	assert.Equal(t, gopipeline.ChainName, r.Workflow)
	assert.Equal(t, first, deref2(r.Status.RetryOf))
	assert.Equal(t, 7.0, r.Status.Result)
	assert.Equal(t, []string{"s3", "s4", "s5", "exit"}, ranIn(t, dir), "only the failed step, what follows and the exit handler ran")
	one := 1
	for _, name := range []string{"s1", "s2"} {
		st := genStep(&r, name)
		assert.Equal(t, gen.StepStateCACHED, st.State, name)
		assert.Equal(t, "reused from run "+first+" (step "+name+", attempt 1)", deref2(st.Message))
		assert.Equal(t, &gen.CacheSource{Run: first, Step: name, Attempt: &one}, st.CachedFrom)
		assert.Nil(t, st.Attempts, "a reused step has no attempt")
	}
	assert.Equal(t, map[string]any{"n": 7.0}, genStep(&r, "s1").Outputs)
	assert.Equal(t, gen.StepStateSUCCEEDED, genStep(&r, "report").State)

	// resumeFrom s4: s4, s5 and the exit handler run; s1–s3 are reused,
	// s1 still naming the run that ran it.
	again := s.retry(retried, "s4")
	r = s.ended(again, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	assert.Equal(t, []string{"s4", "s5", "exit"}, ranIn(t, dir))
	assert.Equal(t, gen.StepStateCACHED, genStep(&r, "s3").State)
	assert.Equal(t, &gen.CacheSource{Run: first, Step: "s1", Attempt: &one}, genStep(&r, "s1").CachedFrom)

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
