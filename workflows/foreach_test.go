package workflows_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/examples/gopipeline"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// runFanOut runs the example.FanOut Go pipeline over n items.
func runFanOut(t *testing.T, n int) (gopipeline.FanOutResult, runstate.Status, *fakeRuntime) {
	t.Helper()
	env, rt, _ := newWideEnv(t)
	env.RegisterWorkflowWithOptions(gopipeline.FanOut, workflow.RegisterOptions{Name: gopipeline.FanOutName})
	env.ExecuteWorkflow(gopipeline.FanOutName, gopipeline.FanOutInput{Items: n, Parallelism: 200})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res gopipeline.FanOutResult
	require.NoError(t, env.GetWorkflowResult(&res))
	return res, status(t, env), rt
}

func sumOfSquares(n int) float64 {
	var s float64
	for k := 0; k < n; k++ {
		s += float64(k * k)
	}
	return s
}

// Run.ForEach over 50 items runs in the Go pipeline's workflow with every
// item in the status; Run.Reduce evaluates in the workflow.
func TestGoForEachSmall(t *testing.T) {
	res, s, rt := runFanOut(t, 50)
	assert.Equal(t, gopipeline.FanOutResult{Items: 50, Sum: sumOfSquares(50)}, res)
	sq := stepNamed(t, s, "square")
	assert.Equal(t, runstate.StepSucceeded, sq.State)
	assert.Len(t, sq.Items, 50)
	assert.Nil(t, sq.Wide)
	assert.Len(t, rt.commands(), 50)
}

// Past 1,000 items Run.ForEach runs wide (batch workflows, records in the
// item store, counts in the status) and Run.Reduce reads the outputs
// through the render activity.
func TestGoForEachWide(t *testing.T) {
	res, s, rt := runFanOut(t, 1500)
	assert.Equal(t, gopipeline.FanOutResult{Items: 1500, Sum: sumOfSquares(1500), Wide: true}, res)
	sq := stepNamed(t, s, "square")
	assert.Equal(t, runstate.StepSucceeded, sq.State)
	require.NotNil(t, sq.Wide)
	assert.Equal(t, runstate.ItemCounts{Succeeded: 1500}, sq.Wide.Counts)
	assert.Empty(t, sq.Items)
	assert.Len(t, rt.commands(), 1500)
}

type shard struct {
	Path string `json:"path"`
	Rows int    `json:"rows"`
}

// goForEach runs a Go pipeline that calls Run.ForEach with items and c and
// returns the step's error, its result and the run status.
func goForEach(t *testing.T, items workflows.ForEachItems, c pipeline.Container) (workflows.ForEachResult, string, runstate.Status) {
	t.Helper()
	env, _, _ := newWideEnv(t)
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) (string, error) {
		run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{})
		if err != nil {
			return "", err
		}
		res, err := run.ForEach(ctx, "each", items, c).Get(ctx)
		if err != nil {
			return fmt.Sprintf("%T: %v", err, err), run.End(nil, nil)
		}
		b, _ := json.Marshal(res)
		return string(b), run.End(nil, nil)
	}, workflow.RegisterOptions{Name: "test.foreach"})
	env.ExecuteWorkflow("test.foreach")
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var out string
	require.NoError(t, env.GetWorkflowResult(&out))
	var res workflows.ForEachResult
	if json.Unmarshal([]byte(out), &res) == nil && res.Step != "" {
		return res, "", status(t, env)
	}
	return workflows.ForEachResult{}, out, status(t, env)
}

// Items may be any slice: templates see structs by their JSON names.
func TestGoForEachStructItems(t *testing.T) {
	res, errMsg, _ := goForEach(t, workflows.ForEachItems{Items: []shard{{"a.parquet", 3}, {"b.parquet", 5}}},
		pipeline.Container{Command: []string{"ok file={{ item.path }} n={{ item.rows * 2 }}"}})
	require.Empty(t, errMsg)
	assert.Equal(t, "each", res.Step)
	assert.Equal(t, 2, res.Items)
	assert.Equal(t, []workflows.Outputs{{"file": "a.parquet", "n": 6.0}, {"file": "b.parquet", "n": 10.0}}, res.Outputs)
}

// Bad items fail the step at once with what is wrong; a failed item fails
// it with the item's error, as a declarative forEach does.
func TestGoForEachErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		items workflows.ForEachItems
		cmd   string
		want  string
	}{
		{"not a list", workflows.ForEachItems{Items: map[string]int{"a": 1}}, "ok", "a map[string]int is neither a slice nor an expression string"},
		{"no items", workflows.ForEachItems{}, "ok", "forEach items: none"},
		{"parallelism", workflows.ForEachItems{Items: "0..3", Parallelism: 5000}, "ok", "parallelism 5000: use 1 to 1000"},
		{"bad expression", workflows.ForEachItems{Items: "0..params.nope"}, "ok", "evaluating forEach items"},
		{"too many", workflows.ForEachItems{Items: "0..100000"}, "ok", "100001 items; the limit is 100000"},
		{"item fails", workflows.ForEachItems{Items: []int{1, 2, 3}}, "fail", `step "each" failed: item `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errMsg, s := goForEach(t, tc.items, pipeline.Container{Command: []string{tc.cmd}})
			assert.Contains(t, errMsg, "*workflows.StepError")
			assert.Contains(t, errMsg, tc.want)
			assert.Equal(t, runstate.StepFailed, stepNamed(t, s, "each").State)
		})
	}
}
