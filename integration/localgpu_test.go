package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// A worker on a machine with one GPU (a fake nvidia-smi on its PATH, as
// the machine has no real one) runs two GPU steps of a run one after the
// other, each seeing the device through CUDA_VISIBLE_DEVICES, the waiting
// one saying why it waits; a CPU step sees no GPU, and a step asking for
// more GPUs than the machine has fails saying what it has.
func TestLocalGPUsAreHandedToSteps(t *testing.T) {
	s := newStack(t, stackOptions{noWorker: true})
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "nvidia-smi"),
		[]byte("#!/bin/sh\necho '0, GPU-1111, NVIDIA L4, 23034'\n"), 0o755))
	for _, p := range []string{bin, filepath.Dir(bin)} {
		require.NoError(t, os.Chmod(p, 0o755))
	}
	s.startWorkerProcess(t, "worker.log", "PATH="+bin+":"+os.Getenv("PATH"))

	dir := stepScratchDir(t)
	s.createPipeline("gpu-local", fmt.Sprintf(`
steps:
  - name: a
    container:
      command: ["sh", "-c", "echo \"a $CUDA_VISIBLE_DEVICES\" >> %[1]s/seen; touch %[1]s/a.started; sleep 2; echo a-done >> %[1]s/seen"]
      resources: {gpu: 1, gpuType: NVIDIA-L4}
  - name: b
    container:
      command: ["sh", "-c", "echo \"b $CUDA_VISIBLE_DEVICES\" >> %[1]s/seen; touch %[1]s/b.started; sleep 2; echo b-done >> %[1]s/seen"]
      resources: {gpu: 1}
  - name: cpu
    container:
      command: ["sh", "-c", "echo \"cpu [${CUDA_VISIBLE_DEVICES-unset}]\" >> %[1]s/cpu"]
`, dir))
	id := s.start("gpu-local", nil)

	// While one GPU step runs, the other waits and says why.
	s.waitRun(id, 60*time.Second, "a GPU step waiting for the machine's GPU", func(r gen.Run) bool {
		for _, name := range []string{"a", "b"} {
			st := stepByName(r, name)
			attempts := val(st.Attempts)
			if n := len(attempts); n > 0 && strings.Contains(val(attempts[n-1].Message), "waiting for local GPUs: needs 1") {
				return true
			}
		}
		return false
	})
	r := s.waitTerminal(id, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "run: %+v", r.Status)

	seen, err := os.ReadFile(filepath.Join(dir, "seen"))
	require.NoError(t, err)
	lines := strings.Fields(strings.ReplaceAll(string(seen), "\n", " | "))
	got := strings.Join(lines, " ")
	// One after the other, each on device 0: "x 0 | x-done | y 0 | y-done |".
	require.Regexp(t, `^([ab]) 0 \| ([ab])-done \| ([ab]) 0 \| ([ab])-done \|$`, got)
	require.Equal(t, got[0], got[6], "the step that started first must finish before the other starts: %s", got)
	cpu, err := os.ReadFile(filepath.Join(dir, "cpu"))
	require.NoError(t, err)
	require.Equal(t, "cpu []\n", string(cpu), "a CPU step must see an empty CUDA_VISIBLE_DEVICES")

	s.createPipeline("gpu-too-many", `
steps:
  - name: big
    container:
      command: ["true"]
      resources: {gpu: 2}
`)
	id = s.start("gpu-too-many", nil)
	r = s.waitTerminal(id, 60*time.Second)
	require.Equal(t, gen.RunStateFAILED, r.State)
	big := stepByName(r, "big")
	require.Contains(t, val(big.Error), "needs 2 GPU(s) but this worker's machine has 1")
}
