package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// startWorkerProcess runs `atelier worker` as a child process so the test
// can SIGKILL it, as an OOM killer or a lost node would. env adds
// KEY=VALUE variables (later ones win).
func (s *stack) startWorkerProcess(t *testing.T, logName string, env ...string) *exec.Cmd {
	t.Helper()
	return s.startWorkerProcessWith(t, atelierBinary(t), logName, env...)
}

// startWorkerProcessWith is startWorkerProcess with another binary (the
// previous commit's, for an upgrade).
func (s *stack) startWorkerProcessWith(t *testing.T, bin, logName string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "worker")
	cmd.Env = append(os.Environ(),
		"ATELIER_DATABASE_URL="+s.cfg.DatabaseURL,
		"ATELIER_TEMPORAL="+s.cfg.TemporalHostPort,
		"ATELIER_NAMESPACE="+s.cfg.Namespace,
		"ATELIER_TASK_QUEUE="+s.cfg.TaskQueue,
		"ATELIER_EXAMPLES=true",
		"ATELIER_DATA_DIR="+s.cfg.DataDir,
		"ATELIER_LOG_LEVEL=warn",
		"ATELIER_SECRETS_KEY_URL="+s.cfg.SecretsKeyURL,
		"ATELIER_ARTIFACTS_URL="+s.cfg.ArtifactsURL,
	)
	cmd.Env = append(cmd.Env, env...)
	logf, err := os.Create(filepath.Join(t.TempDir(), logName))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("%s:\n%s", logName, tail(string(b), 4000))
			}
		}
	})
	return cmd
}

// Kill -9 the worker while pipelines are mid-step, restart it: every run
// completes and no step runs twice: the interrupted step's process
// outlives its worker (under its supervisor) and the next worker adopts
// it, its log saying so (issue 29).
func TestWorkerKill9MidPipelineResumes(t *testing.T) {
	s := newStack(t, stackOptions{noWorker: true})
	const runs = 3
	dirs := make([]string, runs)
	ids := make([]string, runs)
	for i := range runs {
		dirs[i] = stepScratchDir(t)
		name := fmt.Sprintf("crashy-%d", i)
		s.createPipeline(name, fmt.Sprintf(`
steps:
  - name: first
    container: {command: ["sh", "-c", "echo first >> %[1]s/ran"]}
  - name: slow
    dependsOn: [first]
    container: {command: ["sh", "-c", "echo slow $ATELIER_EXECUTION >> %[1]s/ran; echo $$ > %[1]s/pid.$(cat %[1]s/ran | wc -l); sleep 3; echo slow-done >> %[1]s/ran"]}
  - name: last
    dependsOn: [slow]
    container: {command: ["sh", "-c", "echo last >> %[1]s/ran"]}
`, dirs[i]))
		ids[i] = s.start(name, nil)
	}

	w := s.startWorkerProcess(t, "worker-1.log")
	var pids []int
	for i := range runs {
		var pid int
		_, err := fmt.Sscan(waitFile(t, filepath.Join(dirs[i], "pid.2"), 60*time.Second), &pid)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	require.NoError(t, w.Process.Signal(syscall.SIGKILL))
	_ = w.Wait()
	killedAt := time.Now()
	time.Sleep(500 * time.Millisecond)
	for _, pid := range pids {
		assert.False(t, processGone(pid), "step process %d died with its worker", pid)
	}

	s.startWorkerProcess(t, "worker-2.log")
	for i, id := range ids {
		r := s.waitTerminal(id, 90*time.Second)
		require.Equal(t, gen.RunStateSUCCEEDED, r.State, "run %d: %+v", i, r.Status)
		ran, err := os.ReadFile(filepath.Join(dirs[i], "ran"))
		require.NoError(t, err)
		assert.Equal(t, "first\nslow 1\nslow-done\nlast\n", string(ran), "every step ran once")
		slow := stepByName(r, "slow")
		assert.Len(t, val(slow.Attempts), 1, "a lost worker is not a failed attempt")
	}
	t.Logf("all %d runs completed %s after the kill", runs, time.Since(killedAt).Round(time.Millisecond))

	// The adoption is visible in the step's log, which has all the output.
	log := s.stepLog(ids[0], "slow", &gen.GetStepLogsParams{Attempt: ptrTo(1)})
	assert.Contains(t, log, "worker restarted; adopted the step's process")
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
