package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/workflows"
)

const goArtifactsName = "test.GoArtifacts"

type goArtifactsInput struct {
	Dir string `json:"dir"`
}

// goArtifacts is a native Go pipeline passing a dataset directory from
// prepare to train, which fails until $DIR/ok exists.
func goArtifacts(ctx workflow.Context, in goArtifactsInput) (string, error) {
	run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{})
	if err != nil {
		return "", err
	}
	_, err = run.Container(ctx, "prepare", pipeline.Container{
		Command: []string{"sh", "-c", `mkdir "$ATELIER_ARTIFACTS/data" && echo rows > "$ATELIER_ARTIFACTS/data/part-0" && echo prepare >> "$DIR/ran"`},
		Env:     map[string]string{"DIR": in.Dir},
		Artifacts: &pipeline.Artifacts{
			Outputs: []pipeline.ArtifactOutput{{Name: "data", Type: pipeline.ArtifactDataset}},
		},
	}).Get(ctx)
	if err == nil {
		_, err = run.Container(ctx, "train", pipeline.Container{
			Command: []string{"sh", "-c", `test -e "$DIR/ok" && cp "$ATELIER_INPUTS/data/part-0" "$ATELIER_ARTIFACTS/model"`},
			Env:     map[string]string{"DIR": in.Dir},
			Artifacts: &pipeline.Artifacts{
				Inputs:  []pipeline.ArtifactInput{{Name: "data", From: "prepare.data"}},
				Outputs: []pipeline.ArtifactOutput{{Name: "model", Type: pipeline.ArtifactModel}},
			},
		}).Get(ctx)
	}
	return "", run.End("", err)
}

// Artifacts in a native Go pipeline, and through a retry from failure:
// the retry reuses prepare (CACHED, nothing runs) with its artifact, and
// train reads the dataset the first run stored.
func TestGoPipelineArtifactsAndRetry(t *testing.T) {
	s := newStack(t, stackOptions{register: func(r worker.Registry) {
		r.RegisterWorkflowWithOptions(goArtifacts, workflow.RegisterOptions{Name: goArtifactsName})
	}})
	require.NoError(t, s.store.UpsertGoWorkflow(context.Background(), catalog.GoWorkflow{Name: goArtifactsName, TaskQueue: s.cfg.TaskQueue}))
	dir := stepScratchDir(t)

	first := s.startRun(gen.CreateRunRequest{Workflow: ptrTo(goArtifactsName), Input: goInput(t, goArtifactsInput{Dir: dir})})
	r := s.waitTerminal(first, time.Minute)
	require.Equal(t, gen.RunStateFAILED, r.State)
	data := val(stepByName(r, "prepare").Artifacts)
	require.Len(t, data, 1)
	assert.Equal(t, "dataset", data[0].Type)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "ok"), nil, 0o666))
	r = s.waitTerminal(s.retry(first, gen.RetryRunRequest{}), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	prep := stepByName(r, "prepare")
	assert.Equal(t, gen.StepStateCACHED, prep.State)
	assert.Equal(t, data, val(prep.Artifacts), "the reused step keeps its artifact")
	in := val(stepByName(r, "train").Inputs)
	require.Len(t, in, 1)
	assert.Equal(t, data[0].Id, in[0].Id, "train read the dataset the first run stored")
	assert.Equal(t, first, in[0].Producer.Run)
	ran, err := os.ReadFile(filepath.Join(dir, "ran"))
	require.NoError(t, err)
	assert.Equal(t, "prepare\n", string(ran), "prepare ran once")
	model := val(stepByName(r, "train").Artifacts)
	require.Len(t, model, 1)
	assert.Equal(t, "rows\n", s.download(model[0].Id, "", false))
}
