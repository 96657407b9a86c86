package integration

import (
	"encoding/base64"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// What an operator sees of a run with the real `temporal` CLI (and so in
// the Temporal UI, which reads the same): the run's details are a
// Markdown table of its steps and states, kept current while it runs, and
// each step activity is summarised by its step and attempt.
func TestRunReadsAsThePipelineInTemporal(t *testing.T) {
	s := newStack(t)
	dir := stepScratchDir(t)
	s.createPipeline("blocking", blockingPipeline(dir))
	id := s.start("blocking", nil)
	waitFile(t, filepath.Join(dir, "pid"), 30*time.Second)

	meta := temporalCLI(t, s, "workflow", "metadata", "--workflow-id", id)
	assert.Contains(t, meta, "| first | container | SUCCEEDED | 1 |", "details while running:\n%s", meta)
	assert.Contains(t, meta, "| block | container | RUNNING |")
	assert.Contains(t, meta, "| later | container | PENDING |")

	s.cancel(id, "enough")
	r := s.waitTerminal(id, 60*time.Second)
	require.Equal(t, gen.RunStateCANCELLED, r.State)
	// The details of a closed workflow are those of its last task.
	var last string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		last = temporalCLI(t, s, "workflow", "describe", "--workflow-id", id)
		if strings.Contains(last, "CANCELLED") {
			break
		}
	}
	assert.Contains(t, last, "CANCELLED", "describe shows the final details:\n%s", last)

	// The summary is a JSON payload, base64 in the CLI's JSON output.
	history := temporalCLI(t, s, "workflow", "show", "--workflow-id", id, "--output", "json")
	summary := base64.StdEncoding.EncodeToString([]byte(`"block · attempt 1"`))
	assert.True(t, strings.Contains(history, summary), "the step activity is named by its step and attempt (%q)", summary)
}
