package integration

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// A promote step registers one item's artifact of a forEach on the real
// stack: train writes a model per item, pick names the best item, and
// the promote step's from, "train[{{ steps.pick.outputs.best }}].model",
// resolves to that item's artifact, which becomes the model's version
// under the alias; an index past the items fails the step saying so.
// With ATELIER_RECORD_HISTORIES=1 it records v13-promote-item.
func TestPromoteAForEachItemsArtifact(t *testing.T) {
	s := newStack(t)
	s.createPipeline("sweep-promote", `
params: [{name: best, type: string, default: "1"}]
steps:
  - name: train
    forEach: {items: [a, b, c]}
    container:
      command: [sh, -c, 'printf "weights-%s" "$ITEM" > "$ATELIER_ARTIFACTS/model.bin"']
      env: {ITEM: "{{ item }}"}
      artifacts:
        outputs: [{name: model, path: model.bin, type: model}]
  - name: pick
    dependsOn: [train]
    container:
      command: [sh, -c, 'echo "{\"best\": $BEST}" > "$ATELIER_OUTPUTS"']
      env: {BEST: "{{ params.best }}"}
  - name: promote
    kind: promote
    promote: {model: sweeper, alias: champion, from: "train[{{ steps.pick.outputs.best }}].model"}
`)
	id := s.start("sweep-promote", nil)
	r := s.waitTerminal(id, 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	items := val(stepByName(r, "train").Items)
	require.Len(t, items, 3)
	want := val(items[1].Artifacts)[0]
	promote := stepByName(r, "promote")
	assert.Equal(t, 1.0, promote.Outputs.(map[string]any)["version"])

	code, body := s.raw("GET", s.path("/models/sweeper/versions/champion"), nil)
	require.Equal(t, 200, code, "%s", body)
	var champ gen.ModelVersion
	require.NoError(t, json.Unmarshal(body, &champ))
	assert.Equal(t, want.Id, champ.Artifact.Id, "champion is item 1's model")
	assert.Equal(t, want.Digest, champ.Artifact.Digest)
	assert.Equal(t, 1, val(champ.Artifact.Producer.Item))

	bad := s.waitTerminal(s.start("sweep-promote", map[string]any{"best": "5"}), 2*time.Minute)
	require.Equal(t, gen.RunStateFAILED, bad.State)
	assert.Equal(t, `from "train[5].model": step "train" (SUCCEEDED) has 3 item(s), so no item 5`, val(stepByName(bad, "promote").Error))

	if os.Getenv("ATELIER_RECORD_HISTORIES") != "" {
		// Guards the promote step that reads an item's artifact.
		time.Sleep(500 * time.Millisecond)
		recordHistory(t, s, "v13-promote-item", id)
	}
}
