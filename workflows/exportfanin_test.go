package workflows_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/foreach"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/runstate"
)

// fanInLineage records the directories the fan-in activity makes (the
// catalogue's part; a small forEach's items come in the request).
type fanInLineage struct {
	foreach.ItemStore
	recorded []runstate.Artifact
}

func (l *fanInLineage) RecordFanIn(_ context.Context, _ string, art runstate.Artifact) error {
	l.recorded = append(l.recorded, art)
	return nil
}

// The child sweeps three items, each writing a "part" (item 2 a
// directory), and exports the forEach's artifact.
const exportingForEachChild = `
steps:
  - name: sweep
    forEach: {items: [0, 1, 2]}
    container:
      command: [sh, -c, 'if [ {{ item }} -eq 2 ]; then mkdir "$ATELIER_ARTIFACTS/part" && echo two > "$ATELIER_ARTIFACTS/part/v"; else echo {{ item }} > "$ATELIER_ARTIFACTS/part"; fi']
      artifacts:
        outputs: [{name: part, type: dataset}]
artifacts:
  - {name: parts, from: sweep.part}
`

// A child pipeline exports a forEach step's artifact: its run assembles
// one directory of each item's artifact under its index (the fan-in
// activity, over the bytes the items stored), and the parent's step reads
// it as one input, on the real local runtime and a directory store.
func TestChildExportsAForEachStepsArtifact(t *testing.T) {
	store, err := artifactstore.Open(t.Context(), "file://"+t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	cat := &fakeCatalogue{}
	cat.add(t, "p1", "sweeper", exportingForEachChild)
	e := newLocalChildEnv(t, store, cat, &memCache{}, "run-1")
	lin := &fanInLineage{}
	e.env.RegisterActivityWithOptions(foreach.New(lin, store).FanIn, activity.RegisterOptions{Name: activities.FanInName})
	in := input(t, `
steps:
  - {name: sweep, kind: pipeline, pipeline: {name: sweeper}}
  - name: read
    container:
      command: [sh, -c, 'cd "$ATELIER_INPUTS/all" && printf "{\"got\": \"%s %s %s\", \"entries\": %s}" "$(cat 0)" "$(cat 1)" "$(cat 2/v)" $(ls | wc -l) > "$ATELIER_OUTPUTS"']
      artifacts:
        inputs: [{name: all, from: sweep.parts}]
`, nil)
	in.RunID = "run-1"
	s := e.run(t, in)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)
	read := s.Steps[1]
	require.Equal(t, runstate.StepSucceeded, read.State, read.Error)
	assert.Equal(t, map[string]any{"got": "0 1 two", "entries": 3.0}, read.Outputs)

	childRun := "run-1.sweep.a1"
	require.Len(t, s.Steps[0].Artifacts, 1)
	art := s.Steps[0].Artifacts[0]
	assert.Equal(t, "parts", art.Name)
	assert.Equal(t, "sweep.part", art.From)
	assert.Equal(t, runstate.ArtifactProducer{Run: childRun, Step: "sweep"}, art.Producer, "the child's forEach step, no item")
	assert.Equal(t, 3, art.Files)
	require.Len(t, lin.recorded, 1)
	assert.Equal(t, art.ID, lin.recorded[0].ID, "recorded in lineage")
	require.Len(t, read.Inputs, 1)
	assert.Equal(t, art.Digest, read.Inputs[0].Digest)
	assert.Empty(t, e.runs[childRun].Warnings)
}
