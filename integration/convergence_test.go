package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/examples/gopipeline"
	"github.com/atelier-ml/atelier/workflows"
)

// listState is the state the run list (Postgres, not the workflow query)
// shows for id, or "" when it is not listed.
func (s *stack) listState(id string) workflows.RunState {
	s.t.Helper()
	var page struct {
		Runs []runView `json:"runs"`
	}
	require.Equal(s.t, 200, s.do("GET", s.path("/runs?limit=500"), nil, &page))
	for _, r := range page.Runs {
		if r.ID == id {
			return r.State
		}
	}
	return ""
}

func (s *stack) waitListed(id string, want workflows.RunState, d time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	var got workflows.RunState
	for time.Now().Before(deadline) {
		if got = s.listState(id); got == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("run %s is listed %q after %s, want %q", id, got, d, want)
}

// Seen by a user: a NUL byte in a failed step's stderr left the run RUNNING
// in the list (jsonb rejects \u0000); a NUL in a param must be a 422.
func TestNULBytesNeverStallTheCatalogue(t *testing.T) {
	s := newStack(t)
	s.createPipeline("nul", `
params:
  - {name: p, type: string, default: ok}
steps:
  - name: fails
    container: {command: ["sh", "-c", "printf 'x\\000y' >&2; exit 1"]}
`)
	id := s.startRun(map[string]any{"pipeline": "nul"})
	s.waitListed(id, workflows.RunFailed, 30*time.Second)
	assert.Contains(t, stepByName(s.getRun(id), "fails").Error, "x\ufffdy")

	var prob struct {
		Status int `json:"status"`
		Errors []struct{ Path, Message string }
	}
	require.Equal(t, 422, s.do("POST", s.path("/runs"), map[string]any{"pipeline": "nul", "params": map[string]any{"p": "a\x00b"}}, &prob))
	require.Len(t, prob.Errors, 1)
	assert.Equal(t, "params.p", prob.Errors[0].Path)
}

// Seen by a user: input that does not fit a Go pipeline's type left the run
// PENDING forever (SSE never ended, cancel answered 409). It must end FAILED
// with the decode error.
func TestGoPipelineInputOfTheWrongTypeFailsTheRun(t *testing.T) {
	s := newStack(t)
	id := s.startRun(map[string]any{"workflow": gopipeline.Name, "input": map[string]any{"dataset": 5}})
	r := s.waitTerminal(id, 30*time.Second)
	require.Equal(t, workflows.RunFailed, r.State)
	assert.Contains(t, r.Status.Error, "cannot unmarshal number")
	assert.Contains(t, r.Status.Error, "dataset")
	s.waitListed(id, workflows.RunFailed, 10*time.Second)
	// The event stream ends with the terminal state.
	events := s.rawGet(t, s.path("/runs/%s/events", id))
	assert.Contains(t, events, `"FAILED"`)
}
