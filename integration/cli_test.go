package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// cliResult is what one `atelier` CLI invocation printed and its exit code.
type cliResult struct {
	stdout, stderr string
	code           int
}

// atelierCLI runs the real binary's client commands with a config file of
// the test's own, as a user's shell would (no ATELIER_URL/TOKEN set).
func atelierCLI(t *testing.T, config string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(atelierBinary(t), args...)
	cmd.Env = append(os.Environ(), "ATELIER_CONFIG="+config, "ATELIER_URL=", "ATELIER_TOKEN=", "ATELIER_PROJECT=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := cliResult{stdout: out.String(), stderr: errb.String()}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		res.code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return res
}

// The CLI used as a user would, against a real gateway and worker: log in,
// push a spec with a mistake (every problem with its line), push it fixed,
// run and watch it (exit 0), watch a failing run (exit 2), list runs as
// JSON, read a step's log, cancel a run (its watch exits 3), and find that
// another project's token sees none of it.
func TestCLIAsAUser(t *testing.T) {
	s := newStack(t)
	config := filepath.Join(t.TempDir(), "atelier", "config.yaml")
	cli := func(args ...string) cliResult { return atelierCLI(t, config, args...) }

	r := cli("login", s.url, "--token", "atl_wrong", "--project", s.project)
	require.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "refused the token")
	r = cli("runs", "list")
	require.Equal(t, 1, r.code, "no login yet")
	assert.Contains(t, r.stderr, "atelier login")

	r = cli("login", s.url, "--token", s.token, "--project", s.project)
	require.Equal(t, 0, r.code, r.stderr)
	fi, err := os.Stat(config)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the config file holds a token")

	dir := t.TempDir()
	bad := filepath.Join(dir, "hello.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(`steps:
  - name: greet
    container: {command: ["sh", "-c", "echo hello from $0", "atelier"]}
  - name: after
    dependsOn: [greet, nope]
    container: {command: ["true"]}
`), 0o600))
	r = cli("pipelines", "push", bad)
	require.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "line 5: steps[1].dependsOn[1]", "the problem is shown at its line")

	good := filepath.Join(dir, "hello.yaml")
	require.NoError(t, os.WriteFile(good, []byte(`steps:
  - name: greet
    container: {command: ["sh", "-c", "echo hello from $0", "atelier"]}
`), 0o600))
	r = cli("pipelines", "push", good)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "created")
	r = cli("pipelines", "push", good)
	assert.Contains(t, r.stdout, "unchanged")

	r = cli("run", "hello", "--watch", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var run struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &run), "stdout is JSON only: %s", r.stdout)
	assert.Equal(t, "SUCCEEDED", run.State)
	assert.Contains(t, r.stderr, "greet", "the live step table goes to stderr")

	r = cli("logs", run.ID, "greet")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "hello from atelier")

	s.createPipeline("fails", `
steps:
  - name: boom
    container: {command: ["sh", "-c", "exit 3"]}
`)
	r = cli("run", "fails", "--watch")
	assert.Equal(t, 2, r.code, "a failed run exits 2: %s", r.stderr)
	assert.Contains(t, r.stdout, "FAILED")
	r = cli("runs", "list", "--pipeline", "fails", "-o", "json")
	var failed struct {
		Runs []struct{ ID string } `json:"runs"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &failed))
	require.Len(t, failed.Runs, 1)
	for flag, want := range map[string]int{"--created-by=ci-editor": 1, "--created-by=someone-else": 0, "--schedule=nightly": 0} {
		r = cli("runs", "list", "--pipeline", "fails", flag, "-o", "json")
		var got struct {
			Runs []struct{ ID string } `json:"runs"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stderr)
		assert.Len(t, got.Runs, want, flag)
	}
	r = cli("retry", failed.Runs[0].ID, "--watch")
	assert.Equal(t, 2, r.code, "the retry fails the same way: %s", r.stderr)

	scratch := stepScratchDir(t)
	s.createPipeline("blocking", blockingPipeline(scratch))
	r = cli("run", "blocking", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &run))
	waitFile(t, filepath.Join(scratch, "pid"), 30*time.Second)
	r = cli("cancel", run.ID, "--reason", "from the CLI")
	require.Equal(t, 0, r.code, r.stderr)
	r = cli("runs", "watch", run.ID)
	assert.Equal(t, 3, r.code, "a cancelled run exits 3: %s", r.stderr)

	r = cli("runs", "list", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var list struct {
		Runs []struct{ ID string } `json:"runs"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	assert.Len(t, list.Runs, 4)
	r = cli("runs", "list", "--state", "failed")
	assert.Equal(t, 3, strings.Count(r.stdout, "\n"), "a header and the two failed runs: %s", r.stdout)

	// An approval gate, decided from the CLI.
	s.createPipeline("gated", `
steps:
  - name: gate
    kind: approval
    approval: {commentRequired: true}
  - name: after
    dependsOn: [gate]
    container: {command: ["true"]}
`)
	r = cli("run", "gated", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &run))
	s.waitRun(run.ID, 30*time.Second, "waiting for approval", func(v gen.Run) bool {
		return v.Status != nil && len(v.Status.Steps) > 0 && v.Status.Steps[0].State == "WAITING_FOR_APPROVAL"
	})
	r = cli("approve", run.ID, "gate")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "comment", "the step requires a comment: %s", r.stderr)
	r = cli("approve", run.ID, "gate", "-m", "looks good")
	require.Equal(t, 0, r.code, r.stderr)
	r = cli("runs", "watch", run.ID)
	assert.Equal(t, 0, r.code, r.stderr)

	// Schedules: a bad cron names the field; a good one is listed,
	// triggered and deleted.
	r = cli("schedules", "create", "bad", "--pipeline", "hello", "--cron", "61 * * * *")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "cron")
	r = cli("schedules", "create", "hourly", "--pipeline", "hello", "--every", "1h", "--paused")
	require.Equal(t, 0, r.code, r.stderr)
	r = cli("schedules", "list")
	assert.Contains(t, r.stdout, "hourly")
	assert.Contains(t, r.stdout, "every 1h0m0s")
	r = cli("schedules", "trigger", "hourly", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	r = cli("schedules", "delete", "hourly")
	require.Equal(t, 0, r.code, r.stderr)
	r = cli("schedules", "get", "hourly")
	assert.Equal(t, 1, r.code)

	other := s.asProject("team-b")
	r = cli("runs", "get", run.ID, "--token", other.token, "--project", s.project)
	assert.Equal(t, 1, r.code)
	r = cli("runs", "get", run.ID, "--token", other.token, "--project", other.project)
	assert.Equal(t, 1, r.code, "another project's token does not see the run")
	assert.Contains(t, r.stderr, "not found")
}
