package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/examples/gopipeline"
)

// triggered triggers a paused schedule through the generated client and
// returns the ID of the run it started.
func (s *stack) triggered(name string) string {
	s.t.Helper()
	ctx := context.Background()
	res, err := s.client().TriggerScheduleWithResponse(ctx, s.project, name)
	require.NoError(s.t, err)
	require.Equal(s.t, http.StatusOK, res.StatusCode(), "%s", res.Body)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		got, err := s.client().GetScheduleWithResponse(ctx, s.project, name)
		require.NoError(s.t, err)
		require.Equal(s.t, http.StatusOK, got.StatusCode(), "%s", got.Body)
		if runs := got.JSON200.RecentRuns; len(runs) > 0 {
			return runs[len(runs)-1].RunId
		}
	}
	s.t.Fatalf("schedule %s started no run", name)
	return ""
}

// A schedule of a native Go pipeline, on the real stack: an unknown
// workflow is a 422 naming the field; a triggered run of example.
// TrainEvaluate is an ordinary run in REST (scheduleId, listed by
// schedule) though the gateway never started it, and succeeds; it can be
// retried although its catalogue row, written by its own workflow, holds
// no input (the retry reads it from Temporal). A scheduled declarative
// run is retried the same way.
func TestGoPipelineScheduleOnRealStack(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	c := s.client()
	input := json.RawMessage(`{"dataset":"iris","learningRates":[0.1],"threshold":0.5}`)
	every := []string{"1h"}
	paused := true

	res, err := c.CreateScheduleWithResponse(ctx, s.project, gen.ScheduleCreate{Name: "go-sched-bad", Workflow: ptrTo("nope"), Input: &input, Every: &every})
	require.NoError(t, err)
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode(), "%s", res.Body)
	require.NotNil(t, res.ApplicationproblemJSON422.Errors)
	assert.Equal(t, "workflow", (*res.ApplicationproblemJSON422.Errors)[0].Path)

	res, err = c.CreateScheduleWithResponse(ctx, s.project, gen.ScheduleCreate{Name: "go-sched", Workflow: ptrTo(gopipeline.Name), Input: &input, Every: &every, Paused: &paused})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), "%s", res.Body)
	// Schedules live in the Temporal namespace the tests share: names of
	// this test's own, deleted at the end.
	t.Cleanup(func() { _, _ = c.DeleteScheduleWithResponse(ctx, s.project, "go-sched") })
	assert.Equal(t, gopipeline.Name, deref2(res.JSON201.Workflow))
	require.NotNil(t, res.JSON201.Input)
	assert.JSONEq(t, string(input), string(*res.JSON201.Input))
	assert.Empty(t, res.JSON201.Pipeline)

	id := s.triggered("go-sched")
	r := s.waitTerminal(id, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	assert.Equal(t, gopipeline.Name, r.Workflow)
	assert.Equal(t, "go-sched", deref2(r.Status.ScheduleId))
	result, _ := r.Status.Result.(map[string]any) // a failed assertion, not a panic that ends every test
	assert.Equal(t, true, result["deployed"], "result %v", r.Status.Result)
	list, err := c.ListRunsWithResponse(ctx, s.project, &gen.ListRunsParams{Schedule: ptrTo("go-sched")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, list.StatusCode(), "%s", list.Body)
	require.Len(t, list.JSON200.Runs, 1)
	assert.Equal(t, id, list.JSON200.Runs[0].Id)

	// Retried from evaluate: prepare and train-0 are reused.
	retried := s.waitTerminal(s.retry(id, gen.RetryRunRequest{ResumeFrom: &[]string{"evaluate"}}), 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, retried.State, "%s", val(retried.Status.Error))
	assert.Equal(t, id, deref2(retried.Status.RetryOf))
	assert.Equal(t, gen.StepStateCACHED, stepByName(retried, "prepare").State)
	assert.Equal(t, gen.StepStateCACHED, stepByName(retried, "train-0").State)
	assert.Equal(t, gen.StepStateSUCCEEDED, stepByName(retried, "evaluate").State)
	assert.Equal(t, gen.StepStateSUCCEEDED, stepByName(retried, "deploy").State)

	// The CLI's form: --workflow and --input; the table names the Go
	// pipeline and has no version.
	config := filepath.Join(t.TempDir(), "atelier", "config.yaml")
	cli := func(args ...string) cliResult { return atelierCLI(t, config, args...) }
	require.Equal(t, 0, cli("login", s.url, "--token", s.token, "--project", s.project).code)
	out := cli("schedules", "create", "go-sched-cli", "--workflow", gopipeline.Name, "--input", string(input), "--every", "1h", "--paused", "-o", "json")
	require.Equal(t, 0, out.code, out.stderr)
	t.Cleanup(func() { _, _ = c.DeleteScheduleWithResponse(ctx, s.project, "go-sched-cli") })
	var created gen.Schedule
	require.NoError(t, json.Unmarshal([]byte(out.stdout), &created), out.stdout)
	assert.Equal(t, gopipeline.Name, deref2(created.Workflow))
	out = cli("schedules", "get", "go-sched-cli")
	require.Equal(t, 0, out.code, out.stderr)
	assert.Regexp(t, `go-sched-cli\s+`+regexp.QuoteMeta(gopipeline.Name)+`\s+-\s`, out.stdout)
	assert.Equal(t, 1, cli("schedules", "create", "go-sched-cli2", "--workflow", gopipeline.Name, "--pipeline", "two", "--every", "1h").code)

	// A scheduled declarative run: its row has no input either.
	code, problems := s.push("two", `
steps:
  - name: a
    container: {command: ["true"]}
  - name: b
    dependsOn: [a]
    container: {command: ["true"]}
`)
	require.Equal(t, http.StatusCreated, code, "%v", problems)
	res, err = c.CreateScheduleWithResponse(ctx, s.project, gen.ScheduleCreate{Name: "go-sched-decl", Pipeline: "two", Every: &every, Paused: &paused})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), "%s", res.Body)
	t.Cleanup(func() { _, _ = c.DeleteScheduleWithResponse(ctx, s.project, "go-sched-decl") })
	id = s.triggered("go-sched-decl")
	require.Equal(t, gen.RunStateSUCCEEDED, s.waitTerminal(id, 60*time.Second).State)
	r = s.waitTerminal(s.retry(id, gen.RetryRunRequest{ResumeFrom: &[]string{"b"}}), 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	assert.Equal(t, gen.StepStateCACHED, stepByName(r, "a").State)
	assert.Equal(t, gen.StepStateSUCCEEDED, stepByName(r, "b").State)
}
