package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/devstack"
)

// Runs of a four-step pipeline while the worker and the Temporal server
// are killed -9 at random (issue 29). Every step appends a "start" line
// when its command starts and an "end" line when it ends; afterwards every
// run must have succeeded (in REST and in Temporal), no step may have
// started again after it had ended, and a step that started twice must
// have been re-run visibly (a later ATELIER_EXECUTION). With supervisors,
// no step should start twice at all: the test reports how many did.
//
// ATELIER_SOAK=10m makes it a long soak (default 25s of faults).
func TestLocalStepsSoakWorkerAndTemporalKill9(t *testing.T) {
	faultsFor := 25 * time.Second
	if v := os.Getenv("ATELIER_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "ATELIER_SOAK")
		faultsFor = d
	}
	state := t.TempDir()
	startTemporal := func(port int) *devstack.TemporalServer {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ts, err := devstack.StartTemporal(ctx, devstack.TemporalOptions{StateDir: state, Headless: true, Port: port}, t.Logf)
		require.NoError(t, err)
		return ts
	}
	temporal := startTemporal(0)
	t.Cleanup(func() { _ = temporal.Stop() })
	var port int
	_, err := fmt.Sscanf(temporal.HostPort()[strings.LastIndexByte(temporal.HostPort(), ':')+1:], "%d", &port)
	require.NoError(t, err)

	s := newStack(t, stackOptions{noWorker: true, temporal: temporal})
	dir := stepScratchDir(t)
	ledger := filepath.Join(dir, "ledger")
	step := func(name string, secs string) string {
		return fmt.Sprintf(`echo "start $ATELIER_RUN_ID %[1]s $ATELIER_EXECUTION" >> %[2]s; sleep %[3]s; echo "end $ATELIER_RUN_ID %[1]s" >> %[2]s`, name, ledger, secs)
	}
	s.createPipeline("soak", fmt.Sprintf(`
steps:
  - name: a
    container: {command: [sh, -c, '%s']}
  - name: b
    dependsOn: [a]
    container: {command: [sh, -c, '%s']}
  - name: c
    dependsOn: [b]
    container: {command: [sh, -c, '%s']}
  - name: d
    dependsOn: [c]
    container: {command: [sh, -c, '%s']}
`, step("a", "0.2"), step("b", "2"), step("c", "0.7"), step("d", "1.5")))

	worker := s.startWorkerProcess(t, "worker-0.log")
	var ids []string
	startRuns := func(n int) {
		for range n {
			key := fmt.Sprintf("soak-%d", len(ids))
			pipeline := "soak"
			var id string
			require.Eventually(t, func() bool {
				res, err := s.client().CreateRunWithResponse(context.Background(), s.project,
					&gen.CreateRunParams{IdempotencyKey: &key}, gen.CreateRunRequest{Pipeline: &pipeline})
				if err != nil || (res.StatusCode() != 201 && res.StatusCode() != 200) {
					return false // Temporal is still coming back: retry, same key
				}
				id = res.JSON201.Id
				return true
			}, time.Minute, 200*time.Millisecond, "start run %s", key)
			ids = append(ids, id)
		}
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 29))
	faults := map[string]int{}
	end := time.Now().Add(faultsFor)
	for n := 1; time.Now().Before(end); n++ {
		startRuns(3)
		time.Sleep(time.Duration(500+rng.IntN(3000)) * time.Millisecond)
		down := time.Duration(1000+rng.IntN(2000)) * time.Millisecond
		if rng.IntN(2) == 0 {
			faults["worker"]++
			require.NoError(t, worker.Process.Signal(syscall.SIGKILL))
			_ = worker.Wait()
			time.Sleep(down)
			worker = s.startWorkerProcess(t, fmt.Sprintf("worker-%d.log", n))
		} else {
			faults["temporal"]++
			require.NoError(t, syscall.Kill(temporal.Pid(), syscall.SIGKILL))
			<-temporal.Exited()
			time.Sleep(down)
			temporal = startTemporal(port)
		}
	}
	t.Logf("%d runs started; faults: %v", len(ids), faults)

	for _, id := range ids {
		r := s.waitTerminal(id, 4*time.Minute)
		require.Equal(t, gen.RunStateSUCCEEDED, r.State, "run %s: %s", id, val(val(r.Status).Error))
		// The catalogue hears of the end just before the workflow completes.
		assert.Eventually(t, func() bool {
			desc, err := s.temporal.DescribeWorkflowExecution(context.Background(), id, "")
			return err == nil && desc.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
		}, 30*time.Second, 100*time.Millisecond, "run %s is not COMPLETED in Temporal", id)
	}

	b, err := os.ReadFile(ledger)
	require.NoError(t, err)
	type key struct{ run, step string }
	starts, ended, execution := map[key]int{}, map[key]bool{}, map[key]string{}
	reruns := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		require.GreaterOrEqual(t, len(f), 3, "ledger line %q", line)
		k := key{f[1], f[2]}
		switch f[0] {
		case "start":
			assert.False(t, ended[k], "%s/%s started again after it had ended", k.run, k.step)
			require.Len(t, f, 4, "ledger line %q", line)
			starts[k]++
			if starts[k] > 1 {
				reruns++
				t.Logf("%s/%s ran again; its log:\n%s", k.run, k.step, s.stepLog(k.run, k.step, &gen.GetStepLogsParams{Attempt: ptrTo(1)}))
				assert.Greater(t, f[3], execution[k], "%s/%s re-run without a new ATELIER_EXECUTION", k.run, k.step)
			}
			execution[k] = f[3]
		case "end":
			ended[k] = true
		}
	}
	assert.Len(t, starts, 4*len(ids), "every step of every run started")
	t.Logf("%d step executions for %d steps: %d re-runs (steps whose process was lost with a supervisor)", len(starts)+reruns, len(starts), reruns)
	assert.Zero(t, reruns, "with supervisors no step should have to run twice")
}
