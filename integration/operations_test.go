package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/platform/telemetry/telemetrytest"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/runstate"
)

// listed is the workflow IDs `temporal workflow list --query q` prints,
// among this stack's runs (the tests share one Temporal server and
// namespace, and every stack's project is "team-a": its task queue is its
// own).
func listed(t *testing.T, s *stack, q string) []string {
	t.Helper()
	q = fmt.Sprintf("(%s) AND TaskQueue='%s'", q, s.cfg.TaskQueue)
	out := temporalCLI(t, s, "workflow", "list", "--query", q, "--output", "json")
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ex struct {
			Execution struct {
				WorkflowID string `json:"workflowId"`
			} `json:"execution"`
		}
		if strings.HasPrefix(strings.TrimSpace(line), "{") && json.Unmarshal([]byte(line), &ex) == nil && ex.Execution.WorkflowID != "" {
			ids = append(ids, ex.Execution.WorkflowID)
		}
	}
	if len(ids) == 0 && strings.HasPrefix(strings.TrimSpace(out), "[") {
		var all []struct {
			Execution struct {
				WorkflowID string `json:"workflowId"`
			} `json:"execution"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &all), out)
		for _, ex := range all {
			ids = append(ids, ex.Execution.WorkflowID)
		}
	}
	return ids
}

// eventuallyListed waits until the query lists exactly want (visibility
// follows a workflow's attribute updates shortly after).
func eventuallyListed(t *testing.T, s *stack, q string, want ...string) {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if got = listed(t, s, q); assert.ObjectsAreEqual(sorted(want), sorted(got)) {
			return
		}
	}
	t.Fatalf("temporal workflow list --query %q: got %v, want %v", q, got, want)
}

func sorted(ss []string) []string {
	out := append([]string{}, ss...)
	slices.Sort(out)
	return out
}

// The recipes of docs/operations.md "Using `temporal` / `tctl` on Atelier
// runs", each run with the real `temporal` CLI against the real stack:
// list a project's failed runs by query, find runs by who started them
// and by the schedule that did, describe one, and cancel one with its
// cleanup (terminate: TestRunTerminatedWithTheTemporalCLIConverges).
func TestOperatorRecipesWithTheTemporalCLI(t *testing.T) {
	s := newStack(t)
	dir := stepScratchDir(t)
	s.createPipeline("fails", `
steps:
  - name: broken
    container: {command: ["sh", "-c", "exit 3"]}
`)
	s.createPipeline("blocking", blockingPipeline(dir))
	s.createPipeline("quick", `
steps:
  - name: hello
    container: {command: ["true"]}
`)
	ci, alice := s.client(), s.clientAs(s.newToken("alice", tokens.RoleEditor))

	failed := s.start("fails", nil)
	require.Equal(t, gen.RunStateFAILED, s.waitTerminal(failed, 60*time.Second).State)
	blocked := s.startRunAs(alice, gen.CreateRunRequest{Pipeline: ptrTo("blocking")})
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "pid"), 60*time.Second)))
	require.NoError(t, err)

	// A project's failed runs.
	eventuallyListed(t, s, fmt.Sprintf("AtelierProject='%s' AND AtelierState='FAILED'", s.project), failed)
	// Who started what: the token's name.
	eventuallyListed(t, s, "AtelierCreatedBy='alice'", blocked)
	eventuallyListed(t, s, "AtelierCreatedBy='ci-editor' AND AtelierPipeline='fails'", failed)

	// Describe shows the attributes an operator filters by.
	var desc struct {
		Info struct {
			SearchAttributes struct {
				IndexedFields map[string]struct {
					Data []byte `json:"data"` // a JSON value, base64 in the CLI's JSON
				} `json:"indexedFields"`
			} `json:"searchAttributes"`
		} `json:"workflowExecutionInfo"`
	}
	require.NoError(t, json.Unmarshal([]byte(temporalCLI(t, s, "workflow", "describe", "--workflow-id", blocked, "--output", "json")), &desc))
	attrs := map[string]string{}
	for k, f := range desc.Info.SearchAttributes.IndexedFields {
		attrs[k] = string(f.Data)
	}
	assert.Equal(t, `"alice"`, attrs["AtelierCreatedBy"])
	assert.Equal(t, `"blocking"`, attrs["AtelierPipeline"])
	assert.Equal(t, `"`+s.project+`"`, attrs["AtelierProject"])
	assert.Equal(t, `"RUNNING"`, attrs["AtelierState"])

	// Cancel through Temporal: the same cleanup as a REST cancel.
	temporalCLI(t, s, "workflow", "cancel", "--workflow-id", blocked)
	r := s.waitTerminal(blocked, 60*time.Second)
	assert.Equal(t, gen.RunStateCANCELLED, r.State)
	assert.Equal(t, gen.StepStateCANCELLED, stepByName(r, "later").State)
	require.Eventually(t, func() bool { return processGone(pid) }, 15*time.Second, 50*time.Millisecond, "the step's process outlived the cancel")
	eventuallyListed(t, s, fmt.Sprintf("AtelierProject='%s' AND AtelierState='CANCELLED'", s.project), blocked)

	// A schedule's runs carry its name, and its creator as theirs.
	every := []string{"1h"}
	// Schedules live in the Temporal namespace the tests share: a name of
	// this test's own, deleted at the end.
	const name = "ops-recipe"
	sc, err := alice.CreateScheduleWithResponse(context.Background(), s.project, gen.ScheduleCreate{Name: name, Pipeline: "quick", Every: &every})
	require.NoError(t, err)
	require.Equal(t, 201, sc.StatusCode(), "%s", sc.Body)
	t.Cleanup(func() { _, _ = alice.DeleteScheduleWithResponse(context.Background(), s.project, name) })
	tr, err := alice.TriggerScheduleWithResponse(context.Background(), s.project, name)
	require.NoError(t, err)
	require.Less(t, tr.StatusCode(), 300, "%s", tr.Body)
	var scheduled []string
	for deadline := time.Now().Add(30 * time.Second); len(scheduled) == 0 && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		scheduled = listed(t, s, "AtelierSchedule='"+name+"'")
	}
	require.Len(t, scheduled, 1, "the triggered run is found by its schedule")
	eventuallyListed(t, s, "AtelierCreatedBy='alice'", blocked, scheduled[0])
	eventuallyListed(t, s, "AtelierSchedule='"+name+"' AND AtelierState='SUCCEEDED'", scheduled[0])

	// REST lists the schedule's runs too.
	sched := name
	list, err := ci.ListRunsWithResponse(context.Background(), s.project, &gen.ListRunsParams{Schedule: &sched})
	require.NoError(t, err)
	require.Equal(t, 200, list.StatusCode(), "%s", list.Body)
	require.Len(t, list.JSON200.Runs, 1)
	assert.Equal(t, scheduled[0], list.JSON200.Runs[0].Id)
	bad := "Not_A_Name"
	list, err = ci.ListRunsWithResponse(context.Background(), s.project, &gen.ListRunsParams{Schedule: &bad})
	require.NoError(t, err)
	assert.Equal(t, 400, list.StatusCode(), "a bad schedule name is refused: %s", list.Body)
}

// After real runs, the gateway's /metrics (one registry with the worker,
// as in `atelier dev`) shows the runs and steps by kind and state, the
// attempts' queue wait, and the Temporal SDK's own metrics.
func TestMetricsAfterARun(t *testing.T) {
	s := newStack(t)
	s.createPipeline("two", `
steps:
  - name: a
    container: {command: ["true"]}
  - name: b
    dependsOn: [a]
    container: {command: ["true"]}
  - name: c
    dependsOn: [b]
    container: {command: ["sh", "-c", "exit 3"]}
  - name: d
    dependsOn: [c]
    container: {command: ["true"]}
`)
	s.createPipeline("one", `
steps:
  - name: a
    container: {command: ["true"]}
`)
	id := s.start("two", nil)
	require.Equal(t, gen.RunStateFAILED, s.waitTerminal(id, 60*time.Second).State)
	id = s.start("one", nil)
	require.Equal(t, gen.RunStateSUCCEEDED, s.waitTerminal(id, 60*time.Second).State)

	var v telemetrytest.Values
	var err error
	series := telemetrytest.Series
	require.Eventually(t, func() bool {
		v, err = telemetrytest.Scrape(s.url + "/metrics")
		// The workflows close after their last mirror write, a task
		// after they count their end.
		return err == nil && v[series("atelier_runs_finished_total", "kind", "pipeline", "state", "FAILED")] == 1 &&
			v[series("atelier_runs_finished_total", "kind", "pipeline", "state", "SUCCEEDED")] == 1 &&
			v.Sum("temporal_workflow_completed_total", "task_queue", s.cfg.TaskQueue) == 1 &&
			v.Sum("temporal_workflow_failed_total", "task_queue", s.cfg.TaskQueue) == 1
	}, 15*time.Second, 100*time.Millisecond, "runs finished: %v", err)

	assert.Equal(t, 2.0, v[series("atelier_runs_started_total", "kind", "pipeline")], "started through the API")
	assert.Equal(t, 2.0, v[series("atelier_runs_begun_total", "kind", "pipeline")])
	assert.Equal(t, 1.0, v[series("atelier_run_duration_seconds_count", "kind", "pipeline", "state", "FAILED")])
	assert.Equal(t, 4.0, v[series("atelier_steps_started_total", "kind", "container")])
	assert.Equal(t, 3.0, v[series("atelier_steps_finished_total", "kind", "container", "state", "SUCCEEDED")])
	assert.Equal(t, 1.0, v[series("atelier_steps_finished_total", "kind", "container", "state", "FAILED")])
	assert.Equal(t, 1.0, v[series("atelier_steps_finished_total", "kind", "container", "state", "SKIPPED")])
	assert.Equal(t, 4.0, v[series("atelier_step_attempts_started_total", "kind", "container")])
	assert.Equal(t, 4.0, v[series("atelier_step_queue_wait_seconds_count", "kind", "container")], "every attempt's wait, the failed one's too")
	wait := v[series("atelier_step_queue_wait_seconds_sum", "kind", "container")] / 4
	t.Logf("mean step queue wait on an idle worker: %.1f ms", wait*1000)
	assert.Less(t, wait, 5.0, "an idle worker starts a due attempt within seconds")
	assert.Positive(t, v.Sum("atelier_http_requests_total", "route", "/v1/projects/:project/runs", "method", "POST"))

	for _, f := range telemetry.SDKMetrics {
		name := f.Name
		if f.Type == telemetry.Histogram {
			name += "_count"
		}
		assert.True(t, v.Has(name), "Temporal SDK metric %s is exported", name)
	}
	assert.Equal(t, 1.0, v.Sum("temporal_workflow_completed_total", "workflow_type", runstate.PipelineWorkflowName), "the SDK counted the pipeline workflows' ends")
	assert.Equal(t, 1.0, v.Sum("temporal_workflow_failed_total", "workflow_type", runstate.PipelineWorkflowName))
	if t.Failed() {
		for k := range v {
			if strings.HasPrefix(k, "temporal_workflow") {
				t.Log(k)
			}
		}
	}
}

// Workflow code counts through the replay-safe handler: a run whose
// workflow is evicted from the worker's cache mid-run (as after a worker
// restart) replays its history on the next task without counting the
// replayed events again.
func TestMetricsAreNotCountedAgainOnReplay(t *testing.T) {
	s := newStack(t)
	dir := stepScratchDir(t)
	s.createPipeline("replayed", fmt.Sprintf(`
steps:
  - name: a
    container: {command: ["true"]}
  - name: b
    dependsOn: [a]
    container: {command: ["true"]}
  - name: wait
    dependsOn: [b]
    container: {command: ["sh", "-c", "echo $$ > %[1]s/pid; while [ ! -f %[1]s/go ]; do sleep 0.05; done"]}
  - name: d
    dependsOn: [wait]
    container: {command: ["true"]}
`, dir))
	id := s.start("replayed", nil)
	waitFile(t, filepath.Join(dir, "pid"), 60*time.Second)
	// Purge only while the run is idle (no workflow task pending or in
	// flight): a task evicted mid-way fails and is retried, and what it
	// emitted before failing is emitted again. That is Temporal's
	// at-least-once for workflow-side metrics (docs/operations.md), not the
	// replay this test is about.
	idle := 0
	require.Eventually(t, func() bool {
		d, err := s.temporal.DescribeWorkflowExecution(context.Background(), id, "")
		if err != nil || d.PendingWorkflowTask != nil {
			idle = 0
			return false
		}
		idle++
		return idle >= 3
	}, 30*time.Second, 100*time.Millisecond)
	// Every cached workflow is dropped: the next task replays from the
	// first event, re-running Begin and the code of steps a and b.
	worker.PurgeStickyWorkflowCache()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	require.Equal(t, gen.RunStateSUCCEEDED, s.waitTerminal(id, 60*time.Second).State)

	series := telemetrytest.Series
	var v telemetrytest.Values
	require.Eventually(t, func() bool {
		var err error
		v, err = telemetrytest.Scrape(s.url + "/metrics")
		return err == nil && v[series("atelier_runs_finished_total", "kind", "pipeline", "state", "SUCCEEDED")] == 1
	}, 15*time.Second, 100*time.Millisecond)
	assert.Positive(t, v.Sum("temporal_sticky_cache_total_forced_eviction_total")+v.Sum("temporal_sticky_cache_miss_total"), "the workflow was evicted and replayed")
	assert.Equal(t, 1.0, v[series("atelier_runs_begun_total", "kind", "pipeline")], "Begin ran again in the replay, uncounted")
	// Four steps ran. A replay that counted again would add the three
	// replayed before the purge (a, b, wait: 7 or more). One more is
	// Temporal's at-least-once: the first task after the purge may be
	// failed and retried once the server finds the sticky queue gone, and
	// what it emitted for the step it started is emitted again.
	for _, name := range []string{
		series("atelier_steps_started_total", "kind", "container"),
		series("atelier_steps_finished_total", "kind", "container", "state", "SUCCEEDED"),
		series("atelier_step_attempts_started_total", "kind", "container"),
		series("atelier_step_queue_wait_seconds_count", "kind", "container"),
	} {
		assert.GreaterOrEqual(t, v[name], 4.0, name)
		assert.LessOrEqual(t, v[name], 5.0, "%s: counted again on replay", name)
	}
}
