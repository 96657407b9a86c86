package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/devstack"
)

// upgradeFrom is the commit a rolling upgrade is tested from: the last one
// before the packages moved into floors (runstate, pipeline,
// workflows/admission, workflows/endpoint; issue 22). Move it forward to
// the last release when one is cut.
const upgradeFrom = "ffd8320fe9dbdc41c40e3d6a365a423bedb2bbbb"

// previousBinary builds cmd/atelier as it was at commit, once per machine
// (cached next to the other tools), from `git archive` of this clone: no
// worktree, nothing left in the repository. It skips when the clone does
// not have the commit (a shallow clone).
func previousBinary(t *testing.T, commit string) string {
	t.Helper()
	cache, err := devstack.CacheDir()
	require.NoError(t, err)
	bin := filepath.Join(cache, "atelier-"+commit[:12], "atelier")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if out, err := exec.Command("git", "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("this clone lacks commit %s (shallow?): %v %s", commit, err, out)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	require.NoError(t, err)
	src := t.TempDir()
	// From the top of the clone: run in a subfolder, git archive takes
	// only that subfolder.
	archive := exec.Command("sh", "-c", fmt.Sprintf("git archive %s | tar -x -C %s", commit, src))
	archive.Dir = strings.TrimSpace(string(top))
	out, err := archive.CombinedOutput()
	require.NoError(t, err, "git archive: %s", out)
	t.Logf("building cmd/atelier at %s (once per machine)…", commit[:12])
	tmp := bin + ".tmp"
	require.NoError(t, os.MkdirAll(filepath.Dir(bin), 0o755))
	build := exec.Command("go", "build", "-o", tmp, "./cmd/atelier")
	build.Dir = src
	out, err = build.CombinedOutput()
	require.NoError(t, err, "go build at %s: %s", commit, out)
	require.NoError(t, os.Rename(tmp, bin))
	return bin
}

// A rolling upgrade: runs started by a worker of the previous commit are
// finished by a worker of this one. The new worker has no sticky cache of
// the runs, so it replays each history the old one wrote before it goes
// on: forEach items, a step interrupted by the upgrade, an approval
// decided after it (the Update handled by the new code), and the last
// step.
func TestRollingUpgradeFinishesRunsOfThePreviousVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous commit's binary")
	}
	old := previousBinary(t, upgradeFrom)
	s := newStack(t, stackOptions{noWorker: true})
	dir := stepScratchDir(t)
	s.createPipeline("upgraded", fmt.Sprintf(`
steps:
  - name: fan
    forEach: {items: [1, 2, 3]}
    container: {command: ["sh", "-c", "echo fan-{{ item }} >> %[1]s/ran; echo '{\"v\": {{ item }}}' > $ATELIER_OUTPUTS"]}
  - name: slow
    dependsOn: [fan]
    container: {command: ["sh", "-c", "echo slow >> %[1]s/ran; echo started > %[1]s/slow-started; while [ ! -f %[1]s/go-on ]; do sleep 0.1; done; echo slow-done >> %[1]s/ran"]}
  - name: gate
    kind: approval
    dependsOn: [slow]
    approval: {message: "sum {{ sum(map(steps.fan.outputs, .v)) }}"}
  - name: last
    dependsOn: [gate]
    container: {command: ["sh", "-c", "echo last >> %[1]s/ran"]}
`, dir))

	oldWorker := s.startWorkerProcessWith(t, old, "worker-old.log")
	id := s.start("upgraded", nil)
	waitFile(t, filepath.Join(dir, "slow-started"), 90*time.Second)
	require.NoError(t, oldWorker.Process.Signal(syscall.SIGKILL))
	_ = oldWorker.Wait()

	s.startWorkerProcess(t, "worker-new.log")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go-on"), nil, 0o644))
	r := s.waitStepState(id, "gate", gen.StepStateWAITINGFORAPPROVAL)
	gate := stepByName(r, "gate")
	require.NotNil(t, gate.Approval)
	assert.Equal(t, "sum 6", val(gate.Approval.Message), "the approval rendered from outputs the old worker recorded")
	code, _, body := s.decide(id, "gate", "approve", s.token, nil)
	require.Equal(t, 200, code, body)

	r = s.waitTerminal(id, 90*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	ran, err := os.ReadFile(filepath.Join(dir, "ran"))
	require.NoError(t, err)
	assert.Contains(t, string(ran), "slow-done\nlast\n")
	for _, item := range []string{"fan-1", "fan-2", "fan-3"} {
		assert.Contains(t, string(ran), item+"\n")
	}
}
