package gopipeline

import (
	"fmt"
	"strconv"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/workflows"
)

// Name is the registered workflow type.
const Name = "example.TrainEvaluate"

// Pipeline describes the example for worker registration.
var Pipeline = workflows.GoPipeline{
	Name:        Name,
	Description: "Example Go pipeline: prepare, train one model per learning rate in parallel, evaluate, deploy if good enough.",
	Workflow:    TrainEvaluate,
}

// Input is the typed input of the example pipeline.
type Input struct {
	Dataset       string    `json:"dataset"`
	LearningRates []float64 `json:"learningRates"`
	Threshold     float64   `json:"threshold"`
}

// Result is what the pipeline returns (and what the run shows as result).
type Result struct {
	Rows             float64 `json:"rows"`
	BestLearningRate float64 `json:"bestLearningRate"`
	Accuracy         float64 `json:"accuracy"`
	Deployed         bool    `json:"deployed"`
}

// TrainEvaluate is the workflow function.
func TrainEvaluate(ctx workflow.Context, in Input) (Result, error) {
	run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{Params: map[string]any{
		"dataset": in.Dataset, "learningRates": in.LearningRates, "threshold": in.Threshold,
	}})
	if err != nil {
		return Result{}, err
	}
	res, err := trainEvaluate(ctx, run, in)
	return res, run.End(res, err)
}

func trainEvaluate(ctx workflow.Context, run *workflows.Run, in Input) (Result, error) {
	if in.Dataset == "" || len(in.LearningRates) == 0 {
		return Result{}, temporal.NewNonRetryableApplicationError("input needs a dataset and at least one learning rate", "InvalidInput", nil)
	}
	var res Result
	prep, err := run.Container(ctx, "prepare", sh(`echo "preparing $DATASET"; printf '{"rows": 150}' > "$ATELIER_OUTPUTS"`, "DATASET", in.Dataset)).Get(ctx)
	if err != nil {
		return res, err
	}
	res.Rows, _ = prep["rows"].(float64)

	// Fan out: one training step per learning rate, all in parallel.
	futures := make([]workflows.StepFuture, len(in.LearningRates))
	for i, lr := range in.LearningRates {
		lrs := strconv.FormatFloat(lr, 'g', -1, 64)
		futures[i] = run.Container(ctx, fmt.Sprintf("train-%d", i),
			sh(`echo "training with lr=$LR"; sleep 1; awk -v lr="$LR" 'BEGIN { printf "{\"accuracy\": %.4f}", 0.95 - (lr - 0.05) * (lr - 0.05) * 10 }' > "$ATELIER_OUTPUTS"`, "LR", lrs),
			workflows.WithRetries(pipeline.Retries{Limit: 2}))
	}
	res.Accuracy = -1
	for i, f := range futures {
		out, err := f.Get(ctx)
		if err != nil {
			return res, err
		}
		if acc, _ := out["accuracy"].(float64); acc > res.Accuracy {
			res.Accuracy, res.BestLearningRate = acc, in.LearningRates[i]
		}
	}

	acc := strconv.FormatFloat(res.Accuracy, 'g', -1, 64)
	if _, err := run.Container(ctx, "evaluate", sh(`echo "best accuracy $ACC"`, "ACC", acc)).Get(ctx); err != nil {
		return res, err
	}
	if res.Accuracy < in.Threshold {
		return res, nil
	}
	if _, err := run.Container(ctx, "deploy", sh(`echo "deploying model with accuracy $ACC"`, "ACC", acc)).Get(ctx); err != nil {
		return res, err
	}
	res.Deployed = true
	return res, nil
}

// sh runs script with /bin/sh; values reach it through the environment, never
// by string interpolation into the script.
func sh(script, key, value string) pipeline.Container {
	return pipeline.Container{
		Image:   "busybox:1.36",
		Command: []string{"sh", "-c", script},
		Env:     map[string]string{key: value},
	}
}

// Examples are the native Go pipelines a worker serves with --examples (on
// in atelier dev); the others here are registered by the tests that use
// them.
func Examples() []workflows.GoPipeline {
	return []workflows.GoPipeline{Pipeline, FanOutPipeline}
}
