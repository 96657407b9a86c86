package integration

import (
	"context"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

// realNodePod is the pipeline-wide pod settings that put every container
// step on kubetest's real node: its node selector and taint, and the
// images imported on it (there is no registry to pull from).
func realNodePod() string {
	return fmt.Sprintf(`pod:
  nodeSelector: {%[1]s: "true"}
  tolerations: [{key: %[1]s, operator: Exists, effect: NoSchedule}]
  patch: {spec: {terminationGracePeriodSeconds: 1, containers: [{name: step, imagePullPolicy: Never}]}}
`, kubetest.RealNodeLabel)
}

// Container steps placed on a cluster run as Jobs on a real node (kubelet,
// containerd, runc), started through the gateway like any pipeline: the
// command, arguments, environment and working directory really execute,
// outputs come back through the termination message and feed the next
// step, the log is read back through REST, a failing command fails its
// step with its exit code, an image that is not on the node fails the step
// at once with the kubelet's reason, and a project secret reaches the
// container's environment through the real kubelet while staying out of
// outputs and logs. Subtests share the node, which starts once.
func TestContainerStepsOnARealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Kubernetes control plane and a real node")
	}
	e := newKubeEnv(t, outputsScript, true)
	node := e.kc.RealNode(t)
	t.Logf("real node %s: started in %s (waited %s for the machine's lock)", node.Name,
		node.StartupTime.Round(time.Millisecond), node.LockWait.Round(time.Millisecond))

	t.Run("command, env, outputs, logs", func(t *testing.T) {
		e.createPipeline("real-echo", realNodePod()+fmt.Sprintf(`
steps:
  - name: produce
    placement: {cluster: %[1]s}
    container:
      image: %[2]s
      command: ["sh", "-c"]
      args: ['echo "producing for $GREETING in $(pwd) as uid $(id -u)"; printf "{\"rows\": 150, \"greeting\": \"%%s\", \"cwd\": \"%%s\"}" "$GREETING" "$(pwd)" > "$ATELIER_OUTPUTS"']
      env: {GREETING: real-node}
      workingDir: /tmp
  - name: consume
    dependsOn: [produce]
    placement: {cluster: %[1]s}
    container:
      image: %[2]s
      command: ["sh", "-c", "echo got {{ steps.produce.outputs.rows }} rows from {{ steps.produce.outputs.greeting }}; test {{ steps.produce.outputs.rows }} -eq 150"]
`, e.cluster, kubetest.StepImage))
		start := time.Now()
		id := e.start("real-echo", nil)
		r := e.waitTerminal(id, 3*time.Minute)
		require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
		t.Logf("two Job steps on the real node, end to end: %s", time.Since(start).Round(time.Millisecond))

		produce := stepByName(r, "produce")
		assert.Equal(t, map[string]any{"rows": 150.0, "greeting": "real-node", "cwd": "/tmp"}, produce.Outputs,
			"outputs written by the container's shell, read back from its termination message")
		require.Len(t, val(produce.Attempts), 1)
		a := (*produce.Attempts)[0]
		assert.Equal(t, e.cluster, val(a.Cluster))
		assert.Equal(t, 0, val(a.ExitCode))
		assert.Contains(t, val(a.Object), "job/")

		assert.Equal(t, "producing for real-node in /tmp as uid 0\n", e.stepLog(id, "produce", nil), "the container's log, through REST")
		assert.Equal(t, "got 150 rows from real-node\n", e.stepLog(id, "consume", nil))
		require.Eventually(t, func() bool { return len(e.runObjects(t, id)) == 0 }, 30*time.Second, 100*time.Millisecond,
			"objects left: %v", e.runObjects(t, id))
	})

	t.Run("failing command", func(t *testing.T) {
		e.createPipeline("real-fail", realNodePod()+fmt.Sprintf(`
steps:
  - name: fail
    placement: {cluster: %s}
    container:
      image: %s
      command: ["sh", "-c", "echo about to fail; echo to stderr >&2; exit 3"]
`, e.cluster, kubetest.StepImage))
		id := e.start("real-fail", nil)
		r := e.waitTerminal(id, 2*time.Minute)
		require.Equal(t, gen.RunStateFAILED, r.State)
		st := stepByName(r, "fail")
		assert.Equal(t, gen.StepStateFAILED, st.State)
		require.Len(t, val(st.Attempts), 1)
		assert.Equal(t, 3, val((*st.Attempts)[0].ExitCode), "the container's exit code")
		t.Logf("error: %s", val(st.Error))
		assert.Contains(t, val(st.Error), "container step exited with code 3")
		// Both streams, each line whole; their order is the kubelet's
		// (it timestamps each stream's lines apart).
		log := e.stepLog(id, "fail", nil)
		assert.ElementsMatch(t, []string{"about to fail", "to stderr"}, strings.Split(strings.TrimSuffix(log, "\n"), "\n"), "log %q", log)
	})

	t.Run("image not on the node", func(t *testing.T) {
		e.createPipeline("real-noimage", realNodePod()+fmt.Sprintf(`
steps:
  - name: pull
    placement: {cluster: %s}
    container:
      image: localhost/atelier/absent:1
      command: ["true"]
`, e.cluster))
		start := time.Now()
		id := e.start("real-noimage", nil)
		r := e.waitTerminal(id, 2*time.Minute)
		took := time.Since(start)
		require.Equal(t, gen.RunStateFAILED, r.State)
		msg := val(stepByName(r, "pull").Error)
		t.Logf("failed after %s: %s", took.Round(time.Millisecond), msg)
		assert.Contains(t, msg, "ErrImageNeverPull", "the kubelet's reason")
		assert.Contains(t, msg, "localhost/atelier/absent:1")
		assert.Less(t, took, time.Minute, "at once, not after the image-pull grace or a timeout")
	})

	t.Run("live log, kept after a cancel", func(t *testing.T) {
		e.createPipeline("real-live", realNodePod()+fmt.Sprintf(`
steps:
  - name: tick
    placement: {cluster: %s}
    container:
      image: %s
      command: ["sh", "-c", "i=0; while [ $i -lt 60 ]; do i=$((i+1)); echo tick $i; sleep 1; done"]
`, e.cluster, kubetest.StepImage))
		id := e.start("real-live", nil)
		logOf := func() string { return e.stepLogSoFar(id, "tick") }
		// While the container runs, its lines are served as they come
		// (the cluster worker follows its log).
		var live string
		require.Eventually(t, func() bool {
			live = logOf()
			return strings.Contains(live, "tick 3\n")
		}, 90*time.Second, 200*time.Millisecond, "no live log; last %q", live)
		r := e.getRun(id)
		require.Equal(t, gen.StepStateRUNNING, stepByName(r, "tick").State, "the log was read while the step ran")
		require.NotEmpty(t, val((*stepByName(r, "tick").Attempts)[0].LogUrl), "a Kubernetes attempt links its log")
		assert.True(t, strings.HasPrefix(live, "tick 1\ntick 2\ntick 3\n"), "in order, each line once: %q", live)

		// Cancelled: the pod is deleted, the log it printed stays.
		e.cancel(id, "enough")
		r = e.waitTerminal(id, 2*time.Minute)
		require.Equal(t, gen.RunStateCANCELLED, r.State)
		require.Eventually(t, func() bool { return len(e.runObjects(t, id)) == 0 }, 30*time.Second, 100*time.Millisecond)
		kept := logOf()
		assert.True(t, strings.HasPrefix(kept, live), "the log kept after the cancel starts with what was served live: %q", kept)
		lines := strings.Split(strings.TrimSuffix(kept, "\n"), "\n")
		for i, l := range lines {
			assert.Equal(t, fmt.Sprintf("tick %d", i+1), l, "each line once, in order")
		}
	})

	t.Run("command not found", func(t *testing.T) {
		e.createPipeline("real-nocommand", realNodePod()+fmt.Sprintf(`
steps:
  - name: run
    placement: {cluster: %s}
    container:
      image: %s
      command: ["no-such-command", "--flag"]
`, e.cluster, kubetest.StepImage))
		id := e.start("real-nocommand", nil)
		r := e.waitTerminal(id, 2*time.Minute)
		require.Equal(t, gen.RunStateFAILED, r.State)
		msg := val(stepByName(r, "run").Error)
		t.Logf("error: %s", msg)
		assert.Contains(t, msg, "StartError", "the kubelet's reason")
		assert.Contains(t, msg, `exec: "no-such-command": executable file not found`, "the runtime's message")
	})

	t.Run("project secret", func(t *testing.T) {
		value := fmt.Sprintf("real-pw-%d", time.Now().UnixNano())
		b, _ := json.Marshal(map[string]string{"value": value})
		code, body := e.raw("PUT", e.path("/secrets/db-password"), b)
		require.Equal(t, 201, code, "%s", body)
		e.createPipeline("real-secret", realNodePod()+fmt.Sprintf(`
steps:
  - name: use
    placement: {cluster: %s}
    container:
      image: %s
      command: ["sh", "-c", "echo \"the password is $DB_PASSWORD\"; printf '{\"echo\": \"%%s\", \"length\": %%d}' \"$DB_PASSWORD\" \"${#DB_PASSWORD}\" > $ATELIER_OUTPUTS"]
      secrets: [{name: db-password, env: DB_PASSWORD}]
`, e.cluster, kubetest.StepImage))
		id := e.start("real-secret", nil)
		r := e.waitTerminal(id, 2*time.Minute)
		require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
		outputs, _ := stepByName(r, "use").Outputs.(map[string]any)
		assert.Equal(t, float64(len(value)), outputs["length"], "the real kubelet resolved the env from the Secret")
		assert.Equal(t, "[secret db-password]", outputs["echo"], "outputs are redacted")
		log := e.stepLog(id, "use", nil)
		assert.Equal(t, "the password is [secret db-password]\n", log, "the log is redacted")

		// The attempt's Secret is gone, and the value is in neither the
		// Job, Temporal nor REST.
		jobs, err := e.kube.BatchV1().Jobs(e.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "atelier.dev/run=" + id})
		require.NoError(t, err)
		jb, _ := json.Marshal(jobs)
		assert.NotContains(t, string(jb), value)
		secrets, err := e.kube.CoreV1().Secrets(e.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "atelier.dev/run=" + id})
		if !apierrors.IsNotFound(err) {
			require.NoError(t, err)
			assert.Empty(t, secrets.Items, "the attempt's Secret outlived it")
		}
		assert.NotContains(t, temporalCLI(t, e.stack, "workflow", "show", "--workflow-id", id, "--output", "json"), value)
		code, body = e.raw("GET", e.path("/runs/%s", id), nil)
		require.Equal(t, 200, code)
		assert.NotContains(t, string(body), value)
		assert.False(t, strings.Contains(log, value))
	})
}

// The cluster worker killed with SIGKILL while a container step runs on
// the real node: another worker adopts the Job, the step succeeds with its
// outputs, and its log, followed live before the kill and resumed after
// it (the lines printed while no worker followed included), holds every
// line once, in order.
func TestClusterWorkerKilledMidStepOnARealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Kubernetes control plane and a real node")
	}
	e := newKubeEnv(t, outputsScript, false)
	node := e.kc.RealNode(t)
	t.Logf("real node %s (waited %s for the machine's lock)", node.Name, node.LockWait.Round(time.Millisecond))
	logf, err := os.Create(filepath.Join(t.TempDir(), "cluster-worker.log"))
	require.NoError(t, err)
	defer logf.Close()
	cw := e.startClusterWorkerProcess(t, logf)
	defer func() { _ = cw.Process.Kill(); _ = cw.Wait() }()
	e.waitRegistered(t)

	e.createPipeline("real-kill", realNodePod()+fmt.Sprintf(`
steps:
  - name: tick
    placement: {cluster: %s}
    container:
      image: %s
      command: ["sh", "-c", "i=0; while [ $i -lt 15 ]; do i=$((i+1)); echo tick $i; sleep 1; done; echo '{\"ticks\": 15}' > $ATELIER_OUTPUTS"]
`, e.cluster, kubetest.StepImage))
	id := e.start("real-kill", nil)
	logOf := func() string { return e.stepLogSoFar(id, "tick") }
	require.Eventually(t, func() bool { return strings.Contains(logOf(), "tick 3\n") }, 90*time.Second, 200*time.Millisecond,
		"the log is followed live before the kill")
	require.NoError(t, cw.Process.Signal(syscall.SIGKILL))
	_ = cw.Wait()
	time.Sleep(3 * time.Second) // lines printed while no worker follows
	cw = e.startClusterWorkerProcess(t, logf)

	r := e.waitTerminal(id, 3*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	st := stepByName(r, "tick")
	assert.Equal(t, map[string]any{"ticks": 15.0}, st.Outputs)
	assert.Len(t, val(st.Attempts), 1, "the same attempt, its Job adopted")
	var want strings.Builder
	for i := 1; i <= 15; i++ {
		fmt.Fprintf(&want, "tick %d\n", i)
	}
	assert.Equal(t, want.String(), logOf(), "every line once, in order, across the kill")
	require.Eventually(t, func() bool { return len(e.runObjects(t, id)) == 0 }, 30*time.Second, 100*time.Millisecond)
}
