package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// A run of a subset of a pipeline, started with the CLI as a user would:
// `atelier run --target train` runs train and what it needs, skips the
// rest saying why, and the run's status names its targets; an unknown
// target is refused with the pipeline's steps listed, and nothing starts.
// With ATELIER_RECORD_HISTORIES=1 the run's history is recorded as
// workflows/testdata/v8-targets.json for the replay test.
func TestTargetsOnTheRealStack(t *testing.T) {
	s := newStack(t)
	s.createPipeline("subset", `
steps:
  - {name: prepare, container: {command: [sh, -c, 'echo "{\"rows\": 3}" > "$ATELIER_OUTPUTS"']}}
  - {name: train, container: {command: [sh, -c, 'echo "rows={{ steps.prepare.outputs.rows }}"']}}
  - {name: report, dependsOn: [train], container: {command: ["true"]}}
  - {name: lint, container: {command: ["true"]}}
`)
	config := filepath.Join(t.TempDir(), "config.yaml")
	require.Equal(t, 0, atelierCLI(t, config, "login", s.url, "--token", s.token, "--project", s.project).code)
	cr := atelierCLI(t, config, "run", "subset", "--target", "train", "--watch")
	require.Equal(t, 0, cr.code, "%s", cr.stderr)
	id := strings.TrimSuffix(strings.TrimPrefix(strings.SplitN(cr.stderr, "\n", 2)[0], "run "), " started")
	r := s.waitTerminal(id, time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	assert.Equal(t, []string{"train"}, val(r.Status.Targets))
	for name, want := range map[string]gen.StepState{
		"prepare": gen.StepStateSUCCEEDED, "train": gen.StepStateSUCCEEDED,
		"report": gen.StepStateSKIPPED, "lint": gen.StepStateSKIPPED,
	} {
		assert.Equal(t, want, stepByName(r, name).State, name)
	}
	assert.Equal(t, "skipped: not needed by the run's targets (train)", val(stepByName(r, "lint").Message))
	if os.Getenv("ATELIER_RECORD_HISTORIES") != "" {
		time.Sleep(500 * time.Millisecond) // the final mirror's completion
		recordHistory(t, s, "v8-targets", id)
	}

	before := len(s.listRuns(gen.ListRunsParams{Pipeline: ptrTo("subset")}))
	cr = atelierCLI(t, config, "run", "subset", "--target", "trian")
	assert.NotEqual(t, 0, cr.code)
	assert.Contains(t, cr.stderr, `targets[0]: no step "trian" in pipeline "subset" version 1 (steps: prepare, train, report, lint)`)
	assert.Len(t, s.listRuns(gen.ListRunsParams{Pipeline: ptrTo("subset")}), before, "a refused run started nothing")
}
