package integration

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/s3test"
)

// A child pipeline's artifacts reach its parent on the real stack, with
// the artifacts on a real S3 server (versitygw): the examples
// train-model-artifact (prepare → fit writes a model file; both exported)
// and evaluate-trained (a pipeline step runs it, then evaluate reads the
// exported model and dataset with from: train.<name>). The bytes the
// child wrote reach the consumer; the parent's pipeline step carries the
// child's references (same IDs, the child's step as producer); lineage
// lists the parent's step as a consumer of the child's artifact and
// records no copy; reading an export the child does not have is a 422
// when stored. With ATELIER_RECORD_HISTORIES=1 it records
// v12-child-artifacts (the parent) and v12-child-artifacts-child.
func TestChildPipelineArtifactsOnS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t) // gateway and worker run in this process
	s := newStack(t, stackOptions{artifactsURL: srv.URL("atelier/")})
	for _, name := range []string{"train-model-artifact", "evaluate-trained"} {
		b, err := os.ReadFile("../examples/pipelines/" + name + ".yaml")
		require.NoError(t, err)
		code, problems := s.push(name, string(b))
		require.Equal(t, 201, code, "%s: %v", name, problems)
	}

	id := s.start("evaluate-trained", map[string]any{"rows": 10})
	r := s.waitTerminal(id, 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	train, eval := stepByName(r, "train"), stepByName(r, "evaluate")
	require.Len(t, val(train.Attempts), 1)
	childID := val(train.Attempts)[0].ChildRun.RunId
	child := s.waitTerminal(childID, 10*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, child.State)
	fit := stepByName(child, "fit")
	require.Len(t, val(fit.Artifacts), 1)
	model := val(fit.Artifacts)[0]

	// The pipeline step carries the child's exports, by reference.
	exported := map[string]gen.Artifact{}
	for _, a := range val(train.Artifacts) {
		exported[a.Name] = a
	}
	require.Len(t, exported, 2, "model and dataset")
	assert.Equal(t, model.Id, exported["model"].Id, "the child's artifact, not a copy")
	assert.Equal(t, model.Digest, exported["model"].Digest)
	assert.Equal(t, "fit.model", val(exported["model"].From))
	assert.Equal(t, childID, exported["model"].Producer.Run)
	assert.Equal(t, "fit", exported["model"].Producer.Step)
	assert.Equal(t, "prepare", exported["dataset"].Producer.Step)

	// The bytes reached the consumer: evaluate printed the model it read
	// from $ATELIER_INPUTS/model, which is what the store holds.
	content := s.download(model.Id, "", true)
	want, err := strconv.ParseFloat(strings.TrimSpace(content), 64)
	require.NoError(t, err, "%q", content)
	assert.InDelta(t, 3.0, want, 1e-9, "the mean of (3i mod 7) for i < 10")
	assert.Equal(t, map[string]any{"model": want, "error": 2.0}, eval.Outputs)
	assert.Equal(t, map[string]any{"model": want, "error": 2.0}, r.Status.Result)
	inputs := map[string]gen.Artifact{}
	for _, a := range val(eval.Inputs) {
		inputs[a.Name] = a
	}
	assert.Equal(t, model.Id, inputs["model"].Id)
	assert.Equal(t, "train.model", val(inputs["model"].From))
	assert.Equal(t, exported["dataset"].Id, inputs["dataset"].Id)

	// Lineage: the model's producer is the child's step, its consumer
	// the parent's evaluate step; the parent produced nothing itself.
	var lin gen.ArtifactLineage
	require.Eventually(t, func() bool {
		code, body := s.raw("GET", s.path("/artifacts/%s", model.Id), nil)
		return code == 200 && json.Unmarshal(body, &lin) == nil && len(lin.Consumers) == 1
	}, 10*time.Second, 100*time.Millisecond, "lineage of %s: %+v", model.Id, lin)
	assert.Equal(t, childID, lin.Artifact.Producer.Run)
	assert.Equal(t, "fit", lin.Artifact.Producer.Step)
	require.Len(t, lin.MadeFrom, 1)
	assert.Equal(t, exported["dataset"].Id, lin.MadeFrom[0].Artifact.Id)
	assert.Equal(t, id, lin.Consumers[0].Run)
	assert.Equal(t, "evaluate", lin.Consumers[0].Step)
	assert.Equal(t, "model", lin.Consumers[0].Input)

	var ra gen.RunArtifacts
	require.Eventually(t, func() bool {
		code, body := s.raw("GET", s.path("/runs/%s/artifacts", id), nil)
		return code == 200 && json.Unmarshal(body, &ra) == nil && len(ra.Consumed) == 2
	}, 10*time.Second, 100*time.Millisecond, "lineage of run %s: %+v", id, ra)
	assert.Empty(t, ra.Produced, "the parent wrote nothing: the artifacts are its child's")
	for _, c := range ra.Consumed {
		assert.Equal(t, "evaluate", c.Use.Step)
		assert.Equal(t, childID, c.Artifact.Producer.Run)
	}
	code, body := s.raw("GET", s.path("/runs/%s/artifacts", childID), nil)
	require.Equal(t, 200, code, "%s", body)
	require.NoError(t, json.Unmarshal(body, &ra))
	assert.Len(t, ra.Produced, 2, "dataset and model, recorded once, under the child")

	// Storing a parent that reads what the child does not export: a 422
	// at the reading field, with what the child exports.
	code, problems := s.push("reads-weights", `
steps:
  - {name: train, kind: pipeline, pipeline: {name: train-model-artifact}}
  - {name: use, container: {command: ["true"], artifacts: {inputs: [{name: w, from: train.weights}]}}}
`)
	require.Equal(t, 422, code)
	assert.Contains(t, problems["steps[1].container.artifacts.inputs[0].from"], `step "train" runs pipeline "train-model-artifact", which exports no artifact "weights"; it exports "model", "dataset"`)

	if os.Getenv("ATELIER_RECORD_HISTORIES") != "" {
		// Guards what a run with exported artifacts replays as.
		recordHistory(t, s, "v12-child-artifacts", id)
		recordHistory(t, s, "v12-child-artifacts-child", childID)
	}
}
