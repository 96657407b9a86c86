package integration

import (
	"context"
	"encoding/base64"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/examples/gopipeline"
	"github.com/atelier-ml/atelier/internal/services/reconcile"
	"github.com/atelier-ml/atelier/internal/stack/devstack"
	"github.com/atelier-ml/atelier/runstate"
)

// listState is the state the run list (Postgres, not the workflow query)
// shows for id, or "" when it is not listed.
func (s *stack) listState(id string) gen.RunState {
	s.t.Helper()
	for _, r := range s.listRuns(gen.ListRunsParams{PageSize: ptrTo(500)}) {
		if r.Id == id {
			return r.State
		}
	}
	return ""
}

func (s *stack) waitListed(id string, want gen.RunState, d time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	var got gen.RunState
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
	id := s.start("nul", nil)
	s.waitListed(id, gen.RunStateFAILED, 30*time.Second)
	assert.Contains(t, val(stepByName(s.getRun(id), "fails").Error), "x\ufffdy")

	res, err := s.client().CreateRunWithResponse(context.Background(), s.project, nil, gen.CreateRunRequest{
		Pipeline: ptrTo("nul"), Params: &map[string]any{"p": "a\x00b"}})
	require.NoError(t, err)
	require.Equal(t, 422, res.StatusCode(), "%s", res.Body)
	prob := res.ApplicationproblemJSON422
	require.NotNil(t, prob)
	require.Len(t, val(prob.Errors), 1)
	assert.Equal(t, "params.p", (*prob.Errors)[0].Path)
}

// Seen by a user: input that does not fit a Go pipeline's type left the run
// PENDING forever (SSE never ended, cancel answered 409). It must end FAILED
// with the decode error.
func TestGoPipelineInputOfTheWrongTypeFailsTheRun(t *testing.T) {
	s := newStack(t)
	id := s.startRun(gen.CreateRunRequest{Workflow: ptrTo(gopipeline.Name), Input: goInput(t, map[string]any{"dataset": 5})})
	r := s.waitTerminal(id, 30*time.Second)
	require.Equal(t, gen.RunStateFAILED, r.State)
	assert.Contains(t, val(r.Status.Error), "cannot unmarshal number")
	assert.Contains(t, val(r.Status.Error), "dataset")
	s.waitListed(id, gen.RunStateFAILED, 10*time.Second)
	// The event stream ends with the terminal state.
	assert.Contains(t, s.events(id), `"FAILED"`)
}

// temporalCLI runs the real `temporal` CLI against the test server, as an
// operator would.
func temporalCLI(t *testing.T, s *stack, args ...string) string {
	t.Helper()
	bin, err := devstack.EnsureTemporalCLI(context.Background(), nil)
	require.NoError(t, err)
	args = append(args, "--address", s.cfg.TemporalHostPort, "--namespace", s.cfg.Namespace)
	out, err := exec.Command(bin, args...).CombinedOutput()
	require.NoError(t, err, "temporal %v: %s", args, out)
	return string(out)
}

// payloadsDecoded is the JSON of `temporal ... --output json` followed by
// every payload it holds ("data": base64) decoded, so that a search for a
// value finds it wherever it is, not only where it is printed in clear.
func payloadsDecoded(t *testing.T, text string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(text)
	for _, m := range payloadDataRE.FindAllStringSubmatch(text, -1) {
		if raw, err := base64.StdEncoding.DecodeString(m[1]); err == nil {
			b.WriteString("\n")
			b.Write(raw)
		}
	}
	return b.String()
}

var payloadDataRE = regexp.MustCompile(`"data":\s*"([A-Za-z0-9+/=]+)"`)

// Seen by a user: a run ended outside Atelier (`temporal workflow
// terminate`) stayed RUNNING in REST forever. GET, SSE and the list must
// show TERMINATED with the reason within seconds.
func TestRunTerminatedWithTheTemporalCLIConverges(t *testing.T) {
	s := newStack(t)
	dir := stepScratchDir(t)
	s.createPipeline("blocking", blockingPipeline(dir))
	id := s.start("blocking", nil)
	waitFile(t, filepath.Join(dir, "pid"), 30*time.Second)

	temporalCLI(t, s, "workflow", "terminate", "--workflow-id", id, "--reason", "operator stopped it")
	start := time.Now()
	r := s.waitRun(id, 10*time.Second, "TERMINATED", func(r gen.Run) bool { return r.State == gen.RunStateTERMINATED })
	t.Logf("terminate → TERMINATED in GET after %s", time.Since(start))
	assert.Contains(t, val(r.Status.Error), "operator stopped it")
	assert.Equal(t, gen.StepStateCANCELLED, stepByName(r, "block").State)
	s.waitListed(id, gen.RunStateTERMINATED, 10*time.Second)
	assert.Contains(t, s.events(id), `"TERMINATED"`)
}

// The background sweep converges what nobody reads: a run terminated
// through Temporal shows TERMINATED in the list without any GET, and a row
// whose workflow does not exist in this Temporal (seen: two dev stacks
// sharing one database) ends FAILED saying so.
func TestReconcilerSweepsRunsNobodyReads(t *testing.T) {
	s := newStack(t)
	dir := stepScratchDir(t)
	s.createPipeline("blocking", blockingPipeline(dir))
	id := s.start("blocking", nil)
	waitFile(t, filepath.Join(dir, "pid"), 30*time.Second)
	temporalCLI(t, s, "workflow", "terminate", "--workflow-id", id, "--reason", "sweep me")
	s.waitListed(id, gen.RunStateTERMINATED, 30*time.Second)

	// A RUNNING row with no workflow anywhere, last changed long ago.
	old := time.Now().Add(-time.Hour)
	ghost := runstate.Status{RunID: "ghost-run", Project: s.project, Workflow: runstate.PipelineWorkflowName, State: runstate.Running, Seq: 1, StartedAt: &old}
	require.NoError(t, s.store.MirrorRun(context.Background(), ghost))
	conn, err := pgx.Connect(context.Background(), s.cfg.DatabaseURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), "UPDATE runs SET updated_at = $1 WHERE id = 'ghost-run'", old)
	require.NoError(t, err)
	rec := reconcile.New(s.store, runclient.New(s.temporal, runclient.Config{Namespace: s.cfg.Namespace}), time.Now, zap.NewNop(), reconcile.Options{Interval: 100 * time.Millisecond, Namespace: s.cfg.Namespace})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go rec.Run(ctx)
	s.waitListed("ghost-run", gen.RunStateFAILED, 30*time.Second)
	assert.Contains(t, val(s.getRun("ghost-run").Status.Error), "no workflow in Temporal")
}
