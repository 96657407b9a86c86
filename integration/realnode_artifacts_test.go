package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

// Container steps on a real node read and write artifacts through the
// launcher: an init container copies it from its image into the pod, it
// downloads the inputs and uploads the outputs through the gateway with
// the attempt's grant (the pod never holds the store's credentials), and
// the step's code sees neither the grant nor the launcher's spec, and its
// metrics reach the run's status. A
// dataset directory goes from one Job to the next, a model file comes out,
// the lineage is recorded and the bytes come back through REST. A step
// that does not write its declared output fails naming it, unretried.
func TestArtifactsOnARealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Kubernetes control plane and a real node")
	}
	// The node's pods reach the gateway at the node's address (the host).
	e := newKubeEnv(t, outputsScript, true, stackOptions{listenAddr: "0.0.0.0:0"})
	e.kc.RealNode(t)

	e.createPipeline("real-artifacts", realNodePod()+fmt.Sprintf(`
steps:
  - name: prepare
    placement: {cluster: %[1]s}
    container:
      image: %[2]s
      command: ["sh", "-c"]
      args: ['mkdir -p "$ATELIER_ARTIFACTS/data/train" && printf "1,2\n" > "$ATELIER_ARTIFACTS/data/train/a.csv" && printf "3,4\n" > "$ATELIER_ARTIFACTS/data/b.csv" && echo "{\"rows\": 2}" > "$ATELIER_OUTPUTS"']
      artifacts:
        outputs: [{name: data, type: dataset}]
  - name: train
    placement: {cluster: %[1]s}
    container:
      image: %[2]s
      command: ["sh", "-c"]
      args: ['echo "grant=${ATELIER_LAUNCH_GRANT:-none} spec=${ATELIER_LAUNCH:-none} inputs=$ATELIER_INPUTS"; cat "$ATELIER_INPUTS/data/train/a.csv" "$ATELIER_INPUTS/data/b.csv" > "$ATELIER_ARTIFACTS/model.bin" && echo "{\"trained\": true}" > "$ATELIER_OUTPUTS" && echo "{\"accuracy\": 0.91, \"loss\": [0.7, 0.4, 0.2]}" > "$ATELIER_METRICS"']
      artifacts:
        inputs: [{name: data, from: prepare.data}]
        outputs: [{name: model, path: model.bin, type: model}]
`, e.cluster, kubetest.StepImage))
	start := time.Now()
	id := e.start("real-artifacts", nil)
	r := e.waitTerminal(id, 3*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	t.Logf("two Job steps passing artifacts on the real node, end to end: %s", time.Since(start).Round(time.Millisecond))

	prepare, train := stepByName(r, "prepare"), stepByName(r, "train")
	assert.Equal(t, map[string]any{"rows": 2.0}, prepare.Outputs, "the step's own outputs come back beside its artifacts")
	assert.Equal(t, map[string]any{"trained": true}, train.Outputs)
	require.Len(t, val(prepare.Artifacts), 1)
	dataset := val(prepare.Artifacts)[0]
	assert.Equal(t, "dataset", dataset.Type)
	assert.Equal(t, 2, val(dataset.Files))
	require.Len(t, val(train.Artifacts), 1)
	model := val(train.Artifacts)[0]
	sum := sha256.Sum256([]byte("1,2\n3,4\n"))
	assert.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), model.Digest, "content-addressed: the digest of the bytes the step wrote")
	require.NotNil(t, train.Metrics, "the metrics the step wrote, stored by the launcher and read by the worker")
	assert.Equal(t, map[string]float64{"accuracy": 0.91}, val(train.Metrics.Scalars))
	assert.Equal(t, map[string][]float64{"loss": {0.7, 0.4, 0.2}}, val(train.Metrics.Series))
	require.Len(t, val(train.Inputs), 1)
	assert.Equal(t, dataset.Id, val(train.Inputs)[0].Id)

	log := e.stepLog(id, "train", nil)
	assert.Contains(t, log, "\ngrant=none spec=none inputs=/atelier/inputs\n", "the step's code sees its inputs, not the launcher's grant or spec")
	assert.Contains(t, log, "atelier-launcher: placed 1 input artifacts in ", "the launcher says what it moved, in the step's log")
	assert.Contains(t, log, "atelier-launcher: stored 1 output artifacts in ")
	assert.Equal(t, "1,2\n3,4\n", e.download(model.Id, "", false), "the model's bytes, through REST")
	assert.Equal(t, "1,2\n", e.download(dataset.Id, "train/a.csv", false))

	var ra gen.RunArtifacts
	require.Eventually(t, func() bool {
		code, body := e.raw("GET", e.path("/runs/%s/artifacts", id), nil)
		return code == 200 && json.Unmarshal(body, &ra) == nil && len(ra.Produced) == 2 && len(ra.Consumed) == 1
	}, 10*time.Second, 100*time.Millisecond, "lineage of run %s: %+v", id, ra)

	t.Run("missing output", func(t *testing.T) {
		e.createPipeline("real-artifacts-missing", realNodePod()+fmt.Sprintf(`
steps:
  - name: forgetful
    placement: {cluster: %[1]s}
    retries: {limit: 2}
    container:
      image: %[2]s
      command: ["sh", "-c", "echo done"]
      artifacts:
        outputs: [{name: model}]
`, e.cluster, kubetest.StepImage))
		id := e.start("real-artifacts-missing", nil)
		r := e.waitTerminal(id, 2*time.Minute)
		require.Equal(t, gen.RunStateFAILED, r.State)
		st := stepByName(r, "forgetful")
		assert.Contains(t, val(st.Error), `the step did not write its output artifact "model"`)
		assert.Len(t, val(st.Attempts), 1, "the same code cannot write it on a retry")
	})
}

// A cluster worker stopped (SIGTERM, a rolling restart) while a step with
// artifacts runs on the real node leaves the Job running and the
// attempt's Secret in place; the next worker adopts the Job, and the
// step's output is stored through the launcher under the same attempt.
func TestClusterWorkerStoppedMidLaunchedStepOnARealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Kubernetes control plane and a real node")
	}
	e := newKubeEnv(t, outputsScript, false, stackOptions{listenAddr: "0.0.0.0:0"})
	e.kc.RealNode(t)
	logf, err := os.Create(filepath.Join(t.TempDir(), "cluster-worker.log"))
	require.NoError(t, err)
	defer logf.Close()
	cw := e.startClusterWorkerProcess(t, logf)
	defer func() { _ = cw.Process.Kill(); _ = cw.Wait() }()
	e.waitRegistered(t)

	e.createPipeline("real-stop", realNodePod()+fmt.Sprintf(`
steps:
  - name: train
    placement: {cluster: %s}
    container:
      image: %s
      command: ["sh", "-c", "i=0; while [ $i -lt 10 ]; do i=$((i+1)); echo tick $i; sleep 1; done; printf weights > $ATELIER_ARTIFACTS/model.bin"]
      artifacts:
        outputs: [{name: model, path: model.bin, type: model}]
`, e.cluster, kubetest.StepImage))
	id := e.start("real-stop", nil)
	require.Eventually(t, func() bool { return strings.Contains(e.stepLogSoFar(id, "train"), "tick 2\n") }, 90*time.Second, 200*time.Millisecond,
		"the step runs")
	require.NoError(t, cw.Process.Signal(syscall.SIGTERM))
	_ = cw.Wait()
	cw = e.startClusterWorkerProcess(t, logf)

	r := e.waitTerminal(id, 3*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	st := stepByName(r, "train")
	assert.Len(t, val(st.Attempts), 1, "the same attempt, its Job adopted")
	require.Len(t, val(st.Artifacts), 1)
	sum := sha256.Sum256([]byte("weights"))
	assert.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), val(st.Artifacts)[0].Digest)
	require.Eventually(t, func() bool { return len(e.runObjects(t, id)) == 0 }, 30*time.Second, 100*time.Millisecond)
}

// A Job step without artifacts that declares metrics runs under the
// launcher on a real node: the metrics file it writes is stored by the
// launcher, read back by the cluster worker, and reaches the run's status
// and the comparison of runs, with the goal the step declares. A step
// that declares none (and has no artifacts) runs its command as it is,
// without the launcher or a $ATELIER_METRICS.
func TestDeclaredMetricsOnARealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Kubernetes control plane and a real node")
	}
	e := newKubeEnv(t, outputsScript, true, stackOptions{listenAddr: "0.0.0.0:0"})
	e.kc.RealNode(t)

	e.createPipeline("real-metrics", realNodePod()+fmt.Sprintf(`
params:
  - {name: lr, type: number, default: 0.1}
steps:
  - name: train
    placement: {cluster: %[1]s}
    metrics: {loss: minimize}
    container:
      image: %[2]s
      command: ["sh", "-c"]
      args: ['echo "metrics=$ATELIER_METRICS spec=${ATELIER_LAUNCH:-none}"; echo "{\"loss\": $LR, \"curve\": [0.9, $LR]}" > "$ATELIER_METRICS" && echo "{\"lr\": $LR}" > "$ATELIER_OUTPUTS"']
      env: {LR: "{{ params.lr }}"}
  - name: plain
    placement: {cluster: %[1]s}
    container:
      image: %[2]s
      command: ["sh", "-c", 'echo "metrics=${ATELIER_METRICS:-none} spec=${ATELIER_LAUNCH:-none}"; echo "{\"done\": true}" > "$ATELIER_OUTPUTS"']
`, e.cluster, kubetest.StepImage))
	start := time.Now()
	ida, idb := e.start("real-metrics", map[string]any{"lr": 0.3}), e.start("real-metrics", map[string]any{"lr": 0.2})
	a, b := e.waitTerminal(ida, 3*time.Minute), e.waitTerminal(idb, 3*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, a.State, "%s", val(a.Status.Error))
	require.Equal(t, gen.RunStateSUCCEEDED, b.State, "%s", val(b.Status.Error))
	t.Logf("two runs of a metrics-declaring Job step and a plain one on the real node: %s", time.Since(start).Round(time.Millisecond))

	train := stepByName(b, "train")
	assert.Empty(t, val(train.Artifacts), "no artifacts: the launcher ran for the metrics alone")
	assert.Equal(t, map[string]any{"lr": 0.2}, train.Outputs, "the step's outputs come back through the launcher")
	require.NotNil(t, train.Metrics, "the metrics the step wrote, stored by the launcher and read by the worker")
	assert.Equal(t, map[string]float64{"loss": 0.2}, val(train.Metrics.Scalars))
	assert.Equal(t, map[string][]float64{"curve": {0.9, 0.2}}, val(train.Metrics.Series))
	assert.Contains(t, e.stepLog(idb, "train", nil), "metrics=/atelier/metrics.json spec=none\n",
		"under the launcher: the metrics file is in its volume, and the step's code does not see the launcher's spec")

	plain := stepByName(b, "plain")
	assert.Equal(t, map[string]any{"done": true}, plain.Outputs)
	assert.Nil(t, plain.Metrics)
	assert.Contains(t, e.stepLog(idb, "plain", nil), "metrics=none spec=none\n", "no launcher for a step without metrics or artifacts")

	code, body := e.raw("GET", e.path("/compare?runs=%s&runs=%s", ida, idb), nil)
	require.Equal(t, 200, code, "%s", body)
	var c gen.RunComparison
	require.NoError(t, json.Unmarshal(body, &c))
	require.Len(t, c.Metrics, 1, "%+v", c.Metrics)
	loss := c.Metrics[0]
	assert.Equal(t, "train", loss.Step)
	assert.Equal(t, "loss", loss.Name)
	assert.Equal(t, gen.Minimize, loss.Goal, "the goal the step declares")
	require.Len(t, loss.Values, 2)
	assert.Equal(t, 0.3, val(loss.Values[0]))
	assert.Equal(t, 0.2, val(loss.Values[1]))
	assert.Equal(t, 1, val(loss.Best), "the lower loss is the better")
	require.Len(t, c.Series, 1)
	assert.Equal(t, [][]float64{{0.9, 0.3}, {0.9, 0.2}}, c.Series[0].Values)
}
