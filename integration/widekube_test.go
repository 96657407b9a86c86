package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
	"github.com/atelier-ml/atelier/workflows"
)

// wideKubeItems is the length of the wide steps below: past
// spec.WideThreshold, as few as that allows (every item is a Job, a pod
// and their controllers' work on this machine's two cores).
const wideKubeItems = 1100

// wideKubePipeline: a wide container step with a placement (its items are
// Jobs on the test cluster) and a reducer that reads every item's output.
func wideKubePipeline(cluster string, par int) string {
	return fmt.Sprintf(`
steps:
  - name: fan
    placement: {cluster: %s}
    forEach: {items: "0..%d", parallelism: %d}
    container: {image: busybox:1.36, command: ["sh", "-c", "echo '{\"v\": {{ item }}}' > /dev/termination-log"]}
  - name: total
    container: {command: ["sh", "-c", "echo '{\"sum\": {{ sum(map(steps.fan.outputs, .v)) }}, \"n\": {{ len(steps.fan.outputs) }}}' > $ATELIER_OUTPUTS"]}
`, cluster, wideKubeItems-1, par)
}

// itemOutput is a step pod's program: its item's index as output, read
// back from the pod's termination message as on a real cluster.
func itemOutput(p kubetest.PodRef) kubetest.Exit {
	return kubetest.Exit{After: 50 * time.Millisecond, Message: fmt.Sprintf(`{"v": %s}`, p.Labels["atelier.dev/item"])}
}

// mostJobs is the largest number of the run's Jobs seen at once on the
// API server, polled until ctx ends.
func (e *kubeEnv) mostJobs(ctx context.Context, runID string) int {
	most := 0
	for ctx.Err() == nil {
		jobs, err := e.kube.BatchV1().Jobs(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/run=" + runID})
		if err == nil {
			most = max(most, len(jobs.Items))
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	return most
}

// runPods counts a run's pods still on the API server.
func (e *kubeEnv) runPods(t *testing.T, runID string) int {
	t.Helper()
	pods, err := e.kube.CoreV1().Pods(e.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "atelier.dev/run=" + runID})
	require.NoError(t, err)
	return len(pods.Items)
}

// A wide container step with a placement on the real control plane: 1,100
// items run as 1,100 Jobs (the Job controller, the scheduler and kwok
// doing what they do on a cluster), their outputs come back from the
// pods' termination messages to Postgres, a later step sums them, the
// items are served by REST with their cluster, and the run's end leaves
// nothing on the cluster.
func TestWideKubeForEachOnTheRealControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("1,100 Jobs")
	}
	// Finished item Jobs delete themselves (ttlSecondsAfterFinished) this
	// soon, so they never pile up to 1,100 here.
	old := workflows.WideJobTTL
	workflows.WideJobTTL = 5 * time.Second
	t.Cleanup(func() { workflows.WideJobTTL = old })
	e := newKubeEnv(t, outputsScript, true, stackOptions{concurrency: 200, podScript: itemOutput})
	e.createPipeline("wide-kube", wideKubePipeline(e.cluster, 100))
	start := time.Now()
	id := e.start("wide-kube", nil)
	most := make(chan int)
	ctx, stop := context.WithCancel(context.Background())
	go func() { most <- e.mostJobs(ctx, id) }()
	r := e.waitTerminal(id, 15*time.Minute)
	took := time.Since(start)
	stop()
	peak := <-most
	t.Logf("at most %d Jobs of the run at once", peak)
	t.Logf("%d items as Jobs in %s (%.1f items/s)", wideKubeItems, took.Round(time.Millisecond), float64(wideKubeItems)/took.Seconds())
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))

	fan := stepByName(r, "fan")
	require.Equal(t, gen.StepStateSUCCEEDED, fan.State, val(fan.Error))
	require.NotNil(t, fan.Wide, "a forEach over 1,100 items runs wide")
	if total := stepByName(r, "total"); fan.StartedAt != nil && fan.FinishedAt != nil && total.FinishedAt != nil && r.Status.FinishedAt != nil {
		t.Logf("items %s, reducer %s, end of run (the sweep of the cluster) %s",
			fan.FinishedAt.Sub(*fan.StartedAt).Round(time.Millisecond), total.FinishedAt.Sub(*fan.FinishedAt).Round(time.Millisecond),
			r.Status.FinishedAt.Sub(*total.FinishedAt).Round(time.Millisecond))
	}
	assert.Equal(t, gen.ItemCounts{Succeeded: wideKubeItems}, fan.Wide.Counts)
	total := stepByName(r, "total")
	require.Equal(t, gen.StepStateSUCCEEDED, total.State, val(total.Error))
	assert.Equal(t, map[string]any{"sum": float64((wideKubeItems - 1) * wideKubeItems / 2), "n": float64(wideKubeItems)}, total.Outputs)

	items, page := e.listItems(e.client(), id, "fan", "", 500)
	require.Len(t, items, wideKubeItems)
	require.NotNil(t, page.Counts)
	assert.Equal(t, wideKubeItems, page.Counts.Succeeded)
	for k, it := range items {
		require.Equal(t, k, it.Index)
		require.Equal(t, gen.StepStateSUCCEEDED, it.State)
		require.Equal(t, map[string]any{"v": float64(k)}, it.Outputs, "item %d", k)
		require.NotNil(t, it.Attempts)
		require.Len(t, *it.Attempts, 1)
		a := (*it.Attempts)[0]
		require.Equal(t, e.cluster, val(a.Cluster), "item %d", k)
		require.Contains(t, val(a.Object), "job/fan-i"+fmt.Sprint(k)+"-a1-")
	}

	// The run's end swept the cluster: no Job, no pod of the run is left.
	assert.Empty(t, e.runObjects(t, id))
	require.Eventually(t, func() bool { return e.runPods(t, id) == 0 }, time.Minute, 200*time.Millisecond)
	assert.Less(t, peak, wideKubeItems/2, "finished item Jobs delete themselves rather than wait for the run's end")
	perAttempt := e.workloads.ObjectsPerAttempt()
	jobs := 0
	for k, n := range perAttempt {
		assert.Equal(t, 1, n, "attempt %s has %d objects", k, n)
		jobs += n
	}
	assert.Equal(t, wideKubeItems, jobs, "one Job per item")
}

// Cancelling a wide run whose items are Jobs: the running Jobs are deleted
// (their activities delete them on cancel, the run's sweep catches the
// rest), no new Job starts, the run ends CANCELLED with nothing left.
func TestWideKubeForEachCancel(t *testing.T) {
	if testing.Short() {
		t.Skip("wide fan-out")
	}
	hang := func(kubetest.PodRef) kubetest.Exit { return kubetest.Exit{Never: true} }
	e := newKubeEnv(t, outputsScript, true, stackOptions{concurrency: 200, podScript: hang})
	e.createPipeline("wide-kube-hang", wideKubePipeline(e.cluster, 50))
	id := e.start("wide-kube-hang", nil)
	require.Eventually(t, func() bool { return len(e.runObjects(t, id)) >= 50 }, 3*time.Minute, 200*time.Millisecond)
	r := e.getRun(id)
	require.NotNil(t, stepByName(r, "fan").Wide)

	start := time.Now()
	e.cancel(id, "enough")
	r = e.waitTerminal(id, 3*time.Minute)
	t.Logf("cancelled in %s", time.Since(start).Round(time.Millisecond))
	assert.Equal(t, gen.RunStateCANCELLED, r.State)
	fan := stepByName(r, "fan")
	assert.Equal(t, gen.StepStateCANCELLED, fan.State)
	assert.Equal(t, 50, fan.Wide.Counts.Cancelled)
	assert.Equal(t, wideKubeItems-50, fan.Wide.Counts.NotRun)
	// A terminal state means the sweep has run: nothing of the run is left.
	assert.Empty(t, e.runObjects(t, id))
	require.Eventually(t, func() bool { return e.runPods(t, id) == 0 }, time.Minute, 200*time.Millisecond)
	assert.Len(t, e.workloads.ObjectsPerAttempt(), 50, "no Job started after the cancel")
	cancelled, _ := e.listItems(e.client(), id, "fan", gen.StepStateCANCELLED, 1000)
	assert.Len(t, cancelled, 50)
}

// Kill -9 the cluster worker twice while a wide step's items run as Jobs,
// starting another each time: the items' activities are retried on the
// new worker and adopt their Jobs (also those that finished while no
// worker watched: they delete themselves only a minute later), so the run
// succeeds with every item's output, no item attempt ever had two Jobs,
// and nothing is left on the cluster.
func TestWideKubeForEachSurvivesClusterWorkerKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("wide fan-out")
	}
	slow := func(p kubetest.PodRef) kubetest.Exit {
		ex := itemOutput(p)
		ex.After = 500 * time.Millisecond
		return ex
	}
	e := newKubeEnv(t, outputsScript, false, stackOptions{concurrency: 200, podScript: slow})
	logf, err := os.Create(filepath.Join(t.TempDir(), "cluster-worker.log"))
	require.NoError(t, err)
	defer logf.Close()
	cluster := e.startClusterWorkerProcess(t, logf)
	defer func() { _ = cluster.Process.Kill(); _ = cluster.Wait() }()
	e.waitRegistered(t)
	e.createPipeline("wide-kube-kill", wideKubePipeline(e.cluster, 100))
	id := e.start("wide-kube-kill", nil)

	for kill, after := range []int{250, 700} {
		require.Eventually(t, func() bool { return len(e.workloads.ObjectsPerAttempt()) >= after }, 5*time.Minute, 100*time.Millisecond)
		require.NoError(t, cluster.Process.Signal(syscall.SIGKILL))
		_ = cluster.Wait()
		t.Logf("kill %d after %d Jobs", kill+1, len(e.workloads.ObjectsPerAttempt()))
		cluster = e.startClusterWorkerProcess(t, logf)
	}

	r := e.waitTerminal(id, 10*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	assert.Equal(t, gen.ItemCounts{Succeeded: wideKubeItems}, stepByName(r, "fan").Wide.Counts)
	assert.Equal(t, map[string]any{"sum": float64((wideKubeItems - 1) * wideKubeItems / 2), "n": float64(wideKubeItems)}, stepByName(r, "total").Outputs)
	var dup []string
	for k, n := range e.workloads.ObjectsPerAttempt() {
		if n != 1 {
			dup = append(dup, fmt.Sprintf("%s=%d", k, n))
		}
	}
	assert.Empty(t, dup, "item attempts with more than one Job")
	assert.Len(t, e.workloads.ObjectsPerAttempt(), wideKubeItems, "one attempt per item: none failed for the kills")
	assert.Empty(t, e.runObjects(t, id))
}
