package integration

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/examples/gopipeline"
	"github.com/atelier-ml/atelier/runstate"
)

func readExample(t *testing.T) []byte {
	b, err := os.ReadFile("../examples/pipelines/train-evaluate.yaml")
	require.NoError(t, err)
	return b
}

func TestDeclarativePipelineEndToEnd(t *testing.T) {
	s := newStack(t)
	s.createPipeline("train-evaluate", string(readExample(t)))
	id := s.start("train-evaluate", map[string]any{"dataset": "mnist"})

	r := s.waitTerminal(id, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	for _, st := range r.Status.Steps {
		assert.Contains(t, []gen.StepState{gen.StepStateSUCCEEDED, gen.StepStateSKIPPED}, st.State, st.Name)
	}
	train := stepByName(r, "train")
	require.Len(t, val(train.Items), 2)
	assert.Len(t, train.Outputs, 2)

	// Logs are served by REST from Postgres.
	assert.Contains(t, s.stepLog(id, "train", &gen.GetStepLogsParams{Attempt: ptrTo(1), Item: ptrTo(1)}), "mnist")

	// Listed from Postgres with filters, once the run's last mirror write
	// landed (GET reads the workflow's live state and may be ahead).
	s.waitListed(id, gen.RunStateSUCCEEDED, 10*time.Second)
	runs := s.listRuns(gen.ListRunsParams{Pipeline: ptrTo("train-evaluate"), State: ptrTo(gen.RunStateSUCCEEDED)})
	require.Len(t, runs, 1)
	assert.Equal(t, id, runs[0].Id)

	// Findable in Temporal by search attributes (what the UI and CLI use).
	require.Eventually(t, func() bool {
		resp, err := s.temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf(
			"%s = '%s' AND %s = 'SUCCEEDED' AND WorkflowId = '%s'", runstate.SAProject, s.project, runstate.SAState, id)})
		return err == nil && len(resp.Executions) == 1
	}, 20*time.Second, 200*time.Millisecond)
}

func TestGoPipelineThroughRESTAndSDK(t *testing.T) {
	s := newStack(t)
	input := map[string]any{"dataset": "iris", "learningRates": []float64{0.01, 0.1}, "threshold": 0.5}
	id := s.startRun(gen.CreateRunRequest{Workflow: ptrTo(gopipeline.Name), Input: goInput(t, input)})
	r := s.waitTerminal(id, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	result, _ := r.Status.Result.(map[string]any) // a failed assertion, not a panic that ends every test
	assert.Equal(t, true, result["deployed"], "result %v", r.Status.Result)

	// Started straight from the Temporal Go SDK: it still shows up in the
	// REST API, in the project named by its search attribute.
	run, err := s.temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: "sdk-" + id, TaskQueue: s.cfg.TaskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(temporal.NewSearchAttributeKeyKeyword(runstate.SAProject).ValueSet(s.project)),
	}, gopipeline.Name, gopipeline.Input{Dataset: "iris", LearningRates: []float64{0.2}, Threshold: 0.99})
	require.NoError(t, err)
	var res gopipeline.Result
	require.NoError(t, run.Get(context.Background(), &res))
	assert.False(t, res.Deployed)
	r = s.waitTerminal("sdk-"+id, 20*time.Second)
	assert.Equal(t, gen.RunStateSUCCEEDED, r.State)
	assert.Empty(t, stepByName(r, "deploy").Name, "a Go pipeline only shows the steps it ran")
	assert.Len(t, r.Status.Steps, 3)
}

// A pipeline whose second step records its PID and then blocks.
func blockingPipeline(dir string) string {
	return fmt.Sprintf(`
steps:
  - name: first
    container: {command: ["sh", "-c", "echo first >> %[1]s/ran"]}
  - name: block
    dependsOn: [first]
    container: {command: ["sh", "-c", "echo $$ > %[1]s/pid; echo block >> %[1]s/ran; sleep 300"]}
  - name: later
    dependsOn: [block]
    container: {command: ["sh", "-c", "echo later >> %[1]s/ran"]}
`, dir)
}

func processGone(pid int) bool {
	// /proc/<pid> of a zombie still exists; check its state too.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] == "Z"
}

func TestCancelMidStepKillsProcessAndSkipsLaterSteps(t *testing.T) {
	for _, how := range []string{"rest-signal", "temporal-cancel"} {
		t.Run(how, func(t *testing.T) {
			s := newStack(t)
			dir := stepScratchDir(t)
			s.createPipeline("blocking", blockingPipeline(dir))
			id := s.start("blocking", nil)
			var pid int
			_, err := fmt.Sscan(waitFile(t, filepath.Join(dir, "pid"), 30*time.Second), &pid)
			require.NoError(t, err)

			start := time.Now()
			if how == "rest-signal" {
				s.cancel(id, "wrong dataset")
			} else {
				require.NoError(t, s.temporal.CancelWorkflow(context.Background(), id, ""))
			}
			r := s.waitTerminal(id, 30*time.Second)
			t.Logf("cancel → CANCELLED in %s", time.Since(start))
			require.Equal(t, gen.RunStateCANCELLED, r.State)
			require.NotNil(t, r.Status.Cancel)
			if how == "rest-signal" {
				assert.Equal(t, "wrong dataset", r.Status.Cancel.Reason)
				assert.Contains(t, r.Status.Cancel.Requester, "ci-editor")
			}
			assert.Equal(t, gen.StepStateCANCELLED, stepByName(r, "block").State)
			assert.Equal(t, gen.StepStateCANCELLED, stepByName(r, "later").State)
			require.Eventually(t, func() bool { return processGone(pid) }, 10*time.Second, 50*time.Millisecond, "step process %d still alive", pid)
			time.Sleep(500 * time.Millisecond)
			ran, _ := os.ReadFile(filepath.Join(dir, "ran"))
			assert.Equal(t, "first\nblock\n", string(ran), "later step must never start")

			d, err := s.temporal.DescribeWorkflowExecution(context.Background(), id, "")
			require.NoError(t, err)
			assert.Equal(t, "Canceled", d.WorkflowExecutionInfo.Status.String())
		})
	}
}

func TestBadInputOnRealStack(t *testing.T) {
	s := newStack(t)
	code, problems := s.push("bad", `
steps:
  - name: a
    dependsOn: [b]
    container: {command: [x]}
  - name: b
    dependsOn: [a]
    container: {comand: [y]}
  - name: Bad_Name
    kind: ray
`)
	assert.Equal(t, 422, code)
	require.NotEmpty(t, problems)
	assert.Contains(t, problems, "steps[1].container.comand", "unknown field reported with its path: %+v", problems)

	// An unknown run field (raw: the client's typed body cannot carry
	// one) and a wrong token.
	code, body := s.raw("POST", s.path("/runs"), []byte(`{"pipeline": "x", "colour": "red"}`))
	assert.Equal(t, 400, code, "%s", body)
	res, err := s.clientAs("atl_wrong").ListRunsWithResponse(context.Background(), s.project, nil)
	require.NoError(t, err)
	assert.Equal(t, 401, res.StatusCode())
	assert.NotNil(t, res.ApplicationproblemJSON401, "a problem+json")
}

// The event stream of a finished run replays its state and ends.
func TestEventStreamOnRealStack(t *testing.T) {
	s := newStack(t)
	s.createPipeline("tiny", `
steps:
  - name: hello
    container: {command: ["sh", "-c", "echo hello"]}
`)
	id := s.start("tiny", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The plain client's StreamRunEvents: the body is read as it arrives.
	resp, err := s.client().StreamRunEvents(ctx, s.project, id, nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "text/event-stream", strings.Split(resp.Header.Get("Content-Type"), ";")[0])
	sc := bufio.NewScanner(resp.Body)
	var events []string
	sawSucceeded := false
	for sc.Scan() { // the server ends the stream after the terminal state
		line := sc.Text()
		if strings.HasPrefix(line, "event: ") {
			events = append(events, strings.TrimPrefix(line, "event: "))
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"SUCCEEDED"`) {
			sawSucceeded = true
		}
	}
	require.NoError(t, sc.Err())
	assert.Contains(t, events, "run")
	assert.Contains(t, events, "step")
	assert.True(t, sawSucceeded, "events: %v", events)
}
