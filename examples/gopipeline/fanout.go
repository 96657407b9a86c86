package gopipeline

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/workflows"
)

// FanOutName is the registered workflow type of FanOut.
const FanOutName = "example.FanOut"

// FanOutPipeline shows the Go API's forEach: one step per item, wide (in
// batch workflows, outputs in Postgres) past 1,000 items, and a reducer
// over the outputs.
var FanOutPipeline = workflows.GoPipeline{
	Name:        FanOutName,
	Description: "Example Go pipeline: squares 0..items-1 in one step per item (Run.ForEach; wide past 1,000 items) and sums them (Run.Reduce).",
	Workflow:    FanOut,
}

// FanOutInput is how many items to square (1 to 100,000) and how many at
// a time (0: the default, 10).
type FanOutInput struct {
	Items       int `json:"items"`
	Parallelism int `json:"parallelism,omitempty"`
}

// FanOutResult is the sum of the squares, over how many items, and
// whether they ran wide.
type FanOutResult struct {
	Items int     `json:"items"`
	Sum   float64 `json:"sum"`
	Wide  bool    `json:"wide"`
}

// FanOut squares every item in a step of its own and sums the squares.
func FanOut(ctx workflow.Context, in FanOutInput) (FanOutResult, error) {
	run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{Params: map[string]any{"items": in.Items}})
	if err != nil {
		return FanOutResult{}, err
	}
	out, err := fanOut(ctx, run, in)
	return out, run.End(out, err)
}

func fanOut(ctx workflow.Context, run *workflows.Run, in FanOutInput) (FanOutResult, error) {
	if in.Items < 1 {
		return FanOutResult{}, errors.New("items: give at least 1")
	}
	items := workflows.ForEachItems{Items: fmt.Sprintf("0..%d", in.Items-1), Parallelism: in.Parallelism}
	square := pipeline.Container{
		Image:   "busybox:1.36",
		Command: []string{"sh", "-c", `echo '{"v": {{ item * item }}}' > "$ATELIER_OUTPUTS"`},
	}
	res, err := run.ForEach(ctx, "square", items, square).Get(ctx)
	if err != nil {
		return FanOutResult{}, err
	}
	sum, err := run.Reduce(ctx, res, "sum(map(steps.square.outputs, .v))")
	if err != nil {
		return FanOutResult{}, err
	}
	total, _ := sum.(float64)
	return FanOutResult{Items: res.Items, Sum: total, Wide: res.Wide != nil}, nil
}
