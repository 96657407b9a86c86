package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// The model registry on the real stack: a training step's output that
// declares `register` becomes the next version of the model (the run
// creating it on first use, once however often its status is mirrored);
// an alias moves with a recorded history; a version is read by number or
// alias with the run that made it; bad requests get every problem; and
// another project sees none of it.
func TestModelRegistry(t *testing.T) {
	s := newStack(t)
	s.createPipeline("train-register", `
params:
  - {name: seed, type: string, default: "a"}
steps:
  - name: train
    container:
      command: [sh, -c, 'printf "weights-%s" "$SEED" > "$ATELIER_ARTIFACTS/model.bin"']
      env: {SEED: "{{ params.seed }}"}
      artifacts:
        outputs: [{name: model, path: model.bin, register: fraud-detector}]
`)
	first := s.waitTerminal(s.start("train-register", nil), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, first.State, "%s", val(first.Status.Error))
	second := s.waitTerminal(s.start("train-register", map[string]any{"seed": "b"}), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, second.State)
	art := val(stepByName(second, "train").Artifacts)[0]
	assert.Equal(t, "model", art.Type)
	assert.Equal(t, "fraud-detector", val(art.Register))

	var versions gen.ModelVersionList
	require.Eventually(t, func() bool {
		code, body := s.raw("GET", s.path("/models/fraud-detector/versions"), nil)
		return code == 200 && json.Unmarshal(body, &versions) == nil && len(versions.Items) == 2
	}, 10*time.Second, 100*time.Millisecond, "both runs registered a version: %+v", versions)
	assert.Equal(t, 2, versions.Items[0].Version)
	assert.Equal(t, second.Id, versions.Items[0].Artifact.Producer.Run, "version 2 is the second run's model")
	assert.Equal(t, "run "+first.Id, versions.Items[1].CreatedBy)

	// Registering the same artifact again over REST is the same version.
	code, body := s.raw("POST", s.path("/models/fraud-detector/versions"), []byte(fmt.Sprintf(`{"artifact": %q}`, art.Id)))
	require.Equal(t, 200, code, "%s", body)
	assert.Contains(t, string(body), `"version":2`)
	// Another model can have it too, with metadata.
	code, body = s.raw("POST", s.path("/models/fraud-detector-small/versions"), []byte(fmt.Sprintf(`{"artifact": %q, "format": "vllm", "metadata": {"quantized": true}}`, art.Id)))
	require.Equal(t, 201, code, "%s", body)

	// Aliases: set, move, read by alias, history.
	for _, v := range []int{1, 2} {
		code, body = s.raw("PUT", s.path("/models/fraud-detector/aliases/champion"), []byte(fmt.Sprintf(`{"version": %d}`, v)))
		require.Equal(t, 200, code, "%s", body)
	}
	code, body = s.raw("GET", s.path("/models/fraud-detector/versions/champion"), nil)
	require.Equal(t, 200, code, "%s", body)
	var champ gen.ModelVersion
	require.NoError(t, json.Unmarshal(body, &champ))
	assert.Equal(t, 2, champ.Version)
	assert.Equal(t, []string{"champion"}, champ.Aliases)
	code, body = s.raw("GET", s.path("/models/fraud-detector/alias-events"), nil)
	require.Equal(t, 200, code)
	var events gen.ModelAliasEventList
	require.NoError(t, json.Unmarshal(body, &events))
	require.Len(t, events.Items, 2)
	assert.Equal(t, 1, val(events.Items[0].From))
	assert.Equal(t, 2, val(events.Items[0].To))
	assert.Equal(t, "ci-editor", events.Items[0].Actor)

	// The CLI: models and versions with their aliases, and an alias moved.
	config := filepath.Join(t.TempDir(), "config.yaml")
	require.Equal(t, 0, atelierCLI(t, config, "login", s.url, "--token", s.token, "--project", s.project).code)
	cr := atelierCLI(t, config, "models", "alias", "fraud-detector", "candidate", "1")
	require.Equal(t, 0, cr.code, "%s", cr.stderr)
	cr = atelierCLI(t, config, "models", "ls", "fraud-detector")
	require.Equal(t, 0, cr.code, "%s", cr.stderr)
	assert.Regexp(t, `(?m)^2\s+champion\s`, cr.stdout)
	assert.Regexp(t, `(?m)^1\s+candidate\s`, cr.stdout)
	cr = atelierCLI(t, config, "models", "ls")
	require.Equal(t, 0, cr.code, "%s", cr.stderr)
	assert.Regexp(t, `(?m)^fraud-detector\s+2\s+candidate=1,champion=2\s`, cr.stdout, "the models with their aliases")
	cr = atelierCLI(t, config, "models", "show", "fraud-detector@champion")
	require.Equal(t, 0, cr.code, "%s", cr.stderr)
	assert.Contains(t, cr.stdout, "run "+second.Id)

	// Bad requests.
	code, _ = s.raw("PUT", s.path("/models/fraud-detector/aliases/champion"), []byte(`{"version": 9}`))
	assert.Equal(t, 422, code, "a version that does not exist")
	code, _ = s.raw("POST", s.path("/models/fraud-detector/versions"), []byte(`{"artifact": "0123456789abcdef0123456789abcdef"}`))
	assert.Equal(t, 422, code, "an artifact that does not exist")
	code, _ = s.raw("POST", s.path("/models"), []byte(`{"name": "Bad Name"}`))
	assert.Equal(t, 422, code)
	code, _ = s.raw("POST", s.path("/models"), []byte(`{"name": "fraud-detector"}`))
	assert.Equal(t, 409, code)
	code, _ = s.raw("GET", s.path("/models/fraud-detector/versions/nope"), nil)
	assert.Equal(t, 404, code)
	code, problems := s.push("bad-register", `
steps:
  - name: t
    container:
      command: [sh, -c, "true"]
      artifacts:
        outputs: [{name: data, type: dataset, register: x}, {name: m, register: "Not A Name"}]
`)
	require.Equal(t, 422, code)
	assert.Contains(t, problems, "steps[0].container.artifacts.outputs[0].register")
	assert.Contains(t, problems, "steps[0].container.artifacts.outputs[1].register")

	// Tenancy: another project sees no model, and cannot register this
	// project's artifact.
	other := s.asProject("other-models")
	code, _ = other.raw("GET", other.path("/models/fraud-detector"), nil)
	assert.Equal(t, 404, code)
	code, _ = other.raw("POST", other.path("/models/stolen/versions"), []byte(fmt.Sprintf(`{"artifact": %q}`, art.Id)))
	assert.Equal(t, 422, code, "another project's artifact is unknown here")
	code, _ = other.raw("GET", fmt.Sprintf("/v1/projects/%s/models", s.project), nil)
	assert.Contains(t, []int{403, 404}, code)
}

// Inputs named through the catalogue: a registered model's version by
// alias and an earlier run's artifact by ID (through a param), resolved
// before the step runs and recorded in lineage; an unknown alias or
// another project's artifact fails the step naming it. With
// ATELIER_RECORD_HISTORIES=1 it records v7-artifact-refs.
func TestInputsByModelAndArtifactID(t *testing.T) {
	s := newStack(t)
	s.createPipeline("make", `
steps:
  - name: train
    container:
      command: [sh, -c, 'printf weights > "$ATELIER_ARTIFACTS/model.bin" && printf rows > "$ATELIER_ARTIFACTS/data.csv"']
      artifacts:
        outputs:
          - {name: model, path: model.bin, register: ranker}
          - {name: data, path: data.csv, type: dataset}
`)
	made := s.waitTerminal(s.start("make", nil), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, made.State, "%s", val(made.Status.Error))
	data := val(stepByName(made, "train").Artifacts)[1]
	require.Eventually(t, func() bool {
		code, _ := s.raw("PUT", s.path("/models/ranker/aliases/champion"), []byte(`{"version": 1}`))
		return code == 200
	}, 10*time.Second, 100*time.Millisecond, "the run registered ranker version 1")

	s.createPipeline("use", `
params:
  - {name: data, type: string}
  - {name: model, type: string, default: "ranker@champion"}
steps:
  - name: score
    container:
      command: [sh, -c, 'printf "{\"m\": \"%s\", \"d\": \"%s\"}" "$(cat "$ATELIER_INPUTS/model")" "$(cat "$ATELIER_INPUTS/data")" > "$ATELIER_OUTPUTS"']
      artifacts:
        inputs:
          - {name: model, model: "{{ params.model }}"}
          - {name: data, artifact: "{{ params.data }}"}
`)
	id := s.start("use", map[string]any{"data": data.Id})
	r := s.waitTerminal(id, time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	score := stepByName(r, "score")
	assert.Equal(t, map[string]any{"m": "weights", "d": "rows"}, score.Outputs)
	ins := val(score.Inputs)
	require.Len(t, ins, 2)
	assert.Equal(t, "model:ranker@champion", val(ins[0].From))
	assert.Equal(t, made.Id, ins[0].Producer.Run)
	assert.Equal(t, "artifact:"+data.Id, val(ins[1].From))
	var ra gen.RunArtifacts
	require.Eventually(t, func() bool {
		code, body := s.raw("GET", s.path("/runs/%s/artifacts", id), nil)
		return code == 200 && json.Unmarshal(body, &ra) == nil && len(ra.Consumed) == 2
	}, 10*time.Second, 100*time.Millisecond)
	assert.Equal(t, made.Id, ra.Consumed[0].Artifact.Producer.Run, "lineage leads to the run that made it")
	if os.Getenv("ATELIER_RECORD_HISTORIES") != "" {
		time.Sleep(500 * time.Millisecond)
		recordHistory(t, s, "v7-artifact-refs", id)
	}

	bad := s.waitTerminal(s.start("use", map[string]any{"data": data.Id, "model": "ranker@nope"}), time.Minute)
	require.Equal(t, gen.RunStateFAILED, bad.State)
	assert.Contains(t, val(stepByName(bad, "score").Error), `model ranker has no version or alias "nope"`)
	other := s.asProject("other-refs")
	other.createPipeline("steal", fmt.Sprintf(`
steps:
  - name: s
    container:
      command: [sh, -c, 'cat "$ATELIER_INPUTS/d"']
      artifacts:
        inputs: [{name: d, artifact: %s}]
`, data.Id))
	stolen := other.waitTerminal(other.start("steal", nil), time.Minute)
	require.Equal(t, gen.RunStateFAILED, stolen.State)
	assert.Contains(t, val(stepByName(stolen, "s").Error), "no artifact "+data.Id+" in project other-refs")
	code, problems := s.push("bad-refs", `
steps:
  - name: s
    container:
      command: [sh, -c, "true"]
      artifacts:
        inputs: [{name: a, artifact: xyz}, {name: b, model: "Bad@x"}, {name: c, from: x.y, model: m}]
`)
	require.Equal(t, 422, code)
	for _, p := range []string{"steps[0].container.artifacts.inputs[0].artifact", "steps[0].container.artifacts.inputs[1].model", "steps[0].container.artifacts.inputs[2]"} {
		assert.Contains(t, problems, p)
	}
}
