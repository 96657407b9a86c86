package integration

import (
	"bufio"
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
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/atelier-ml/atelier/examples/gopipeline"
	"github.com/atelier-ml/atelier/workflows"
)

func readExample(t *testing.T) []byte {
	b, err := os.ReadFile("../examples/pipelines/train-evaluate.yaml")
	require.NoError(t, err)
	return b
}

func TestDeclarativePipelineEndToEnd(t *testing.T) {
	s := newStack(t)
	s.createPipeline("train-evaluate", string(readExample(t)))
	id := s.startRun(map[string]any{"pipeline": "train-evaluate", "params": map[string]any{"dataset": "mnist"}})

	r := s.waitTerminal(id, 60*time.Second)
	require.Equal(t, workflows.RunSucceeded, r.State, "%+v", r.Status)
	for _, st := range r.Status.Steps {
		assert.Contains(t, []workflows.StepState{workflows.StepSucceeded, workflows.StepSkipped}, st.State, st.Name)
	}
	train := stepByName(r, "train")
	require.Len(t, train.Items, 2)
	assert.Len(t, train.Outputs, 2)

	// Logs are served by REST from Postgres.
	req, _ := http.NewRequest("GET", s.url+s.path("/runs/%s/steps/train/logs?attempt=1&item=1", id), nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := bufio.NewReader(resp.Body).ReadString(0)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, body, "mnist")

	// Listed from Postgres with filters.
	var page struct {
		Runs []runView `json:"runs"`
	}
	require.Equal(t, 200, s.do("GET", s.path("/runs?pipeline=train-evaluate&state=SUCCEEDED"), nil, &page))
	require.Len(t, page.Runs, 1)
	assert.Equal(t, id, page.Runs[0].ID)

	// Findable in Temporal by search attributes (what the UI and CLI use).
	require.Eventually(t, func() bool {
		resp, err := s.temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf(
			"%s = '%s' AND %s = 'SUCCEEDED' AND WorkflowId = '%s'", workflows.SAProject, s.project, workflows.SAState, id)})
		return err == nil && len(resp.Executions) == 1
	}, 20*time.Second, 200*time.Millisecond)
}

func TestGoPipelineThroughRESTAndSDK(t *testing.T) {
	s := newStack(t)
	input := map[string]any{"dataset": "iris", "learningRates": []float64{0.01, 0.1}, "threshold": 0.5}
	id := s.startRun(map[string]any{"workflow": gopipeline.Name, "input": input})
	r := s.waitTerminal(id, 60*time.Second)
	require.Equal(t, workflows.RunSucceeded, r.State, "%+v", r.Status)
	assert.Equal(t, true, r.Status.Result.(map[string]any)["deployed"])

	// Started straight from the Temporal Go SDK: it still shows up in the
	// REST API, in the project named by its search attribute.
	run, err := s.temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: "sdk-" + id, TaskQueue: s.cfg.TaskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(temporal.NewSearchAttributeKeyKeyword(workflows.SAProject).ValueSet(s.project)),
	}, gopipeline.Name, gopipeline.Input{Dataset: "iris", LearningRates: []float64{0.2}, Threshold: 0.99})
	require.NoError(t, err)
	var res gopipeline.Result
	require.NoError(t, run.Get(context.Background(), &res))
	assert.False(t, res.Deployed)
	r = s.waitTerminal("sdk-"+id, 20*time.Second)
	assert.Equal(t, workflows.RunSucceeded, r.State)
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
			id := s.startRun(map[string]any{"pipeline": "blocking"})
			var pid int
			_, err := fmt.Sscan(waitFile(t, filepath.Join(dir, "pid"), 30*time.Second), &pid)
			require.NoError(t, err)

			start := time.Now()
			if how == "rest-signal" {
				require.Equal(t, 202, s.do("POST", s.path("/runs/%s/cancel", id), map[string]any{"reason": "wrong dataset"}, nil))
			} else {
				require.NoError(t, s.temporal.CancelWorkflow(context.Background(), id, ""))
			}
			r := s.waitTerminal(id, 30*time.Second)
			t.Logf("cancel → CANCELLED in %s", time.Since(start))
			require.Equal(t, workflows.RunCancelled, r.State)
			require.NotNil(t, r.Status.Cancel)
			if how == "rest-signal" {
				assert.Equal(t, "wrong dataset", r.Status.Cancel.Reason)
				assert.Contains(t, r.Status.Cancel.Requester, "ci-editor")
			}
			assert.Equal(t, workflows.StepCancelled, stepByName(r, "block").State)
			assert.Equal(t, workflows.StepCancelled, stepByName(r, "later").State)
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
	var prob struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
		Errors []struct {
			Path    string `json:"path"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	code := s.do("POST", s.path("/pipelines/bad/versions"), []byte(`
steps:
  - name: a
    dependsOn: [b]
    container: {command: [x]}
  - name: b
    dependsOn: [a]
    container: {comand: [y]}
  - name: Bad_Name
    kind: ray
`), &prob)
	assert.Equal(t, 422, code)
	require.NotEmpty(t, prob.Errors)
	paths := map[string]bool{}
	for _, e := range prob.Errors {
		paths[e.Path] = true
	}
	assert.True(t, paths["steps[1].container.comand"], "unknown field reported with its path: %+v", prob.Errors)

	// Unknown run field and a missing token.
	assert.Equal(t, 400, s.do("POST", s.path("/runs"), map[string]any{"pipeline": "x", "colour": "red"}, &prob))
	s.token = "atl_wrong"
	assert.Equal(t, 401, s.do("GET", s.path("/runs"), nil, &prob))
}

// The event stream of a finished run replays its state and ends.
func TestEventStreamOnRealStack(t *testing.T) {
	s := newStack(t)
	s.createPipeline("tiny", `
steps:
  - name: hello
    container: {command: ["sh", "-c", "echo hello"]}
`)
	id := s.startRun(map[string]any{"pipeline": "tiny"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url+s.path("/runs/%s/events", id), nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
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
