package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/atelier-ml/atelier/activities"

	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

// GPU admission on the real control plane: the fleet has two L4 nodes of
// one GPU each and the project a quota of two L4s. Three one-GPU steps:
// two are admitted and their pods bound by the real scheduler, the third
// waits in WAITING_FOR_GPU with no Kubernetes object, saying why, and runs
// once a GPU is given back. A waiting run that is cancelled leaves the
// queue.
func TestGPUAdmissionQueuesStepsBeyondQuotaAndCapacity(t *testing.T) {
	e := newKubeEnv(t, func(string) kubetest.Exit {
		return kubetest.Exit{After: 4 * time.Second, Message: `{}`}
	}, true)
	ctx := context.Background()
	e.setupL4Admission(t, "one-l4", 0)
	a := e.start("one-l4", nil)
	b := e.start("one-l4", nil)
	// Both admitted: their Jobs exist and their pods are bound to L4 nodes.
	for _, id := range []string{a, b} {
		e.waitRun(id, 60*time.Second, "admitted and running", func(r gen.Run) bool {
			return r.Status != nil && len(r.Status.Steps) == 1 && r.Status.Steps[0].State == gen.StepStateRUNNING
		})
	}
	c := e.start("one-l4", nil)
	var waiting gen.StepStatus
	e.waitRun(c, 60*time.Second, "waiting for GPUs with a reason", func(r gen.Run) bool {
		if r.Status == nil || len(r.Status.Steps) == 0 {
			return false
		}
		waiting = r.Status.Steps[0]
		return waiting.State == gen.StepStateWAITINGFORGPU && strings.HasPrefix(val(waiting.Message), "waiting for GPUs: ")
	})
	t.Logf("waiting step: %s", val(waiting.Message))
	assert.Contains(t, val(waiting.Message), kubetest.L4)
	assert.Empty(t, e.runObjects(t, c), "a waiting step must create no Kubernetes object")
	// The queue over REST says the same, with the run's position.
	res, err := e.client().GetClusterQueueWithResponse(ctx, e.cluster)
	require.NoError(t, err)
	require.Equal(t, 200, res.StatusCode(), "%s", res.Body)
	q := res.JSON200
	require.Len(t, q.Pending, 1)
	assert.Equal(t, c, val(q.Pending[0].Run))
	assert.Equal(t, 1, val(q.Pending[0].Position))
	assert.Equal(t, string(gpu.WaitQuota), val(q.Pending[0].Reason))
	assert.Len(t, q.Running, 2)
	pods, err := e.kube.CoreV1().Pods(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/managed-by=atelier"})
	require.NoError(t, err)
	admittedNodes := map[string]bool{}
	for _, r := range q.Running {
		for _, n := range val(r.Nodes) {
			admittedNodes[n] = true
		}
	}
	for _, p := range pods.Items {
		if p.Labels["atelier.dev/run"] == a || p.Labels["atelier.dev/run"] == b {
			assert.NotEmpty(t, p.Spec.NodeName, "admitted pod %s not bound", p.Name)
			assert.NotEqual(t, corev1.PodFailed, p.Status.Phase)
			assert.True(t, admittedNodes[p.Spec.NodeName], "pod %s runs on %s, not on a node admission chose (%v)", p.Name, p.Spec.NodeName, admittedNodes)
			assert.NotNil(t, p.Spec.Affinity, "pod %s is not pinned to its admitted nodes", p.Name)
		}
	}

	// A fourth run waits too, then is cancelled while waiting: it leaves
	// the queue and never creates anything.
	d := e.start("one-l4", nil)
	e.waitRun(d, 60*time.Second, "waiting", func(r gen.Run) bool {
		return r.Status != nil && len(r.Status.Steps) == 1 && r.Status.Steps[0].State == gen.StepStateWAITINGFORGPU
	})
	e.cancel(d, "changed my mind")
	assert.Equal(t, gen.RunStateCANCELLED, e.waitTerminal(d, 30*time.Second).State)
	require.Eventually(t, func() bool {
		q := e.admissionQueue(t)
		for _, p := range q.Pending {
			if p.Run == d {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the cancelled run's workload is still queued")

	// The third run gets a GPU when one of the first two ends, and all
	// three succeed.
	for _, id := range []string{a, b, c} {
		r := e.waitTerminal(id, 120*time.Second)
		require.Equal(t, gen.RunStateSUCCEEDED, r.State, "run %s: %+v", id, r.Status)
	}
	assert.Empty(t, e.runObjects(t, d))
	final := e.admissionQueue(t)
	assert.Empty(t, final.Pending)
	assert.Empty(t, final.Running, "every step gave its GPUs back")
}

// setupL4Admission gives the project a quota of two L4s (priorities up to
// maxPriority), waits for the cluster's GPU inventory, and stores a
// pipeline of one single-L4 container step.
func (e *kubeEnv) setupL4Admission(t *testing.T, pipeline string, maxPriority int) {
	t.Helper()
	ctx := context.Background()
	_, err := e.store.PutGPUPolicy(ctx, catalog.GPUPolicy{ProjectPolicy: gpu.ProjectPolicy{
		Name: e.project, MaxPriority: maxPriority,
		Quotas: []gpu.Quota{{Resource: kubetest.L4, Nominal: 2}},
	}})
	require.NoError(t, err)
	// Admission decides on the inventory the cluster worker reports.
	require.Eventually(t, func() bool {
		c, err := e.store.GetCluster(ctx, e.cluster)
		return err == nil && c.Capacity != nil && len(c.Capacity.GPUNodes) > 0
	}, 60*time.Second, 100*time.Millisecond, "no GPU inventory reported")
	e.createPipeline(pipeline, fmt.Sprintf(`
steps:
  - name: train
    placement: {cluster: %s}
    container: {image: busybox, command: ["true"], resources: {gpu: 1, gpuType: %s}}
`, e.cluster, kubetest.L4))
}

// createL4Sweep stores a pipeline of five one-L4 forEach items, all in
// flight at once.
func (e *kubeEnv) createL4Sweep(name string) {
	e.createPipeline(name, fmt.Sprintf(`
steps:
  - name: trial
    placement: {cluster: %s}
    forEach: {items: "0..4", parallelism: 5}
    container: {image: busybox, command: ["true"], resources: {gpu: 1, gpuType: %s}}
`, e.cluster, kubetest.L4))
}

// admissionQueue asks the cluster's admission workflow for its queue.
func (e *kubeEnv) admissionQueue(t *testing.T) activities.AdmissionQueue {
	t.Helper()
	v, err := e.temporal.QueryWorkflow(context.Background(), activities.AdmissionWorkflowID(e.cluster), "", activities.QueryAdmissionQueue)
	require.NoError(t, err)
	var q activities.AdmissionQueue
	require.NoError(t, v.Get(&q))
	return q
}

// A high-priority run preempts a low-priority one on a full quota: the
// victim's attempt is cancelled and its Job deleted, the high-priority
// step runs, and the victim, queued again, completes later. Its lost
// attempt does not count against its retries (it has none).
func TestGPUPreemptionRequeuesTheVictim(t *testing.T) {
	e := newKubeEnv(t, func(string) kubetest.Exit {
		return kubetest.Exit{After: 6 * time.Second, Message: `{}`}
	}, true, stackOptions{gpuMinRuntime: time.Second})
	e.setupL4Admission(t, "l4-step", 100)

	// Out of range: refused at the edge.
	res, err := e.client().CreateRunWithResponse(context.Background(), e.project, nil, gen.CreateRunRequest{Pipeline: ptrTo("l4-step"), GpuPriority: ptrTo(500)})
	require.NoError(t, err)
	require.Equal(t, 422, res.StatusCode(), "%s", res.Body)
	require.NotNil(t, res.ApplicationproblemJSON422)

	low := []string{e.start("l4-step", nil), e.start("l4-step", nil)}
	for _, id := range low {
		e.waitRun(id, 60*time.Second, "running", func(r gen.Run) bool {
			return r.Status != nil && len(r.Status.Steps) == 1 && r.Status.Steps[0].State == gen.StepStateRUNNING
		})
	}
	time.Sleep(1500 * time.Millisecond) // past the minimum runtime
	high := e.startRun(gen.CreateRunRequest{Pipeline: ptrTo("l4-step"), GpuPriority: ptrTo(50)})

	r := e.waitTerminal(high, 90*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	preempted := 0
	for _, id := range low {
		r := e.waitTerminal(id, 120*time.Second)
		require.Equal(t, gen.RunStateSUCCEEDED, r.State, "run %s: %+v", id, r.Status)
		attempts := val(r.Status.Steps[0].Attempts)
		if len(attempts) > 1 {
			preempted++
			assert.Contains(t, val(attempts[0].Error), "PREEMPTED")
			assert.Equal(t, gen.StepStateCANCELLED, attempts[0].State)
			assert.Equal(t, gen.StepStateSUCCEEDED, attempts[len(attempts)-1].State)
			t.Logf("victim %s: attempt 1: %s", id, val(attempts[0].Error))
		}
	}
	assert.Equal(t, 1, preempted, "exactly one low-priority run is preempted")
	q := e.admissionQueue(t)
	assert.Empty(t, q.Pending)
	assert.Empty(t, q.Running)
}

// A run terminated through Temporal runs no cleanup and never gives its
// GPUs back itself: once the catalogue shows it TERMINATED, the admission
// workflow frees them and a waiting run is admitted.
func TestGPUsOfATerminatedRunAreFreed(t *testing.T) {
	e := newKubeEnv(t, func(string) kubetest.Exit {
		return kubetest.Exit{After: 5 * time.Minute, Message: `{}`}
	}, true)
	e.setupL4Admission(t, "l4-long", 0)
	running := func(r gen.Run) bool {
		return r.Status != nil && len(r.Status.Steps) == 1 && r.Status.Steps[0].State == gen.StepStateRUNNING
	}
	a := e.start("l4-long", nil)
	b := e.start("l4-long", nil)
	e.waitRun(a, 60*time.Second, "running", running)
	e.waitRun(b, 60*time.Second, "running", running)
	c := e.start("l4-long", nil)
	e.waitRun(c, 60*time.Second, "waiting", func(r gen.Run) bool {
		return r.Status != nil && len(r.Status.Steps) == 1 && r.Status.Steps[0].State == gen.StepStateWAITINGFORGPU
	})
	require.NoError(t, e.temporal.TerminateWorkflow(context.Background(), a, "", "operator stopped it"))
	assert.Equal(t, gen.RunStateTERMINATED, e.waitTerminal(a, 30*time.Second).State)
	e.waitRun(c, 60*time.Second, "admitted with the terminated run's GPU", running)
	for _, id := range []string{b, c} {
		e.cancel(id, "done")
		assert.Equal(t, gen.RunStateCANCELLED, e.waitTerminal(id, 60*time.Second).State)
	}
}

// A run's shared RayCluster with GPU workers is admitted once, as a
// workload that is never preempted: while the project's L4 quota is held
// by other runs, the first step on it waits in WAITING_FOR_GPU and the
// cluster is not created; once GPUs are free the cluster is created with
// its GPU pods pinned to the admitted nodes, the steps run, and the GPUs
// are given back when the run ends.
func TestSharedRayClusterIsAdmitted(t *testing.T) {
	e := newKubeEnv(t, func(string) kubetest.Exit {
		return kubetest.Exit{After: 4 * time.Second, Message: `{}`}
	}, true)
	ctx := context.Background()
	e.setupL4Admission(t, "one-l4", 0)
	e.createSharedL4Pipeline("shared-l4", "a", "b")
	holders := []string{e.start("one-l4", nil), e.start("one-l4", nil)}
	for _, id := range holders {
		e.waitRun(id, 60*time.Second, "holding an L4", func(r gen.Run) bool {
			return r.Status != nil && len(r.Status.Steps) == 1 && r.Status.Steps[0].State == gen.StepStateRUNNING
		})
	}
	id := e.start("shared-l4", nil)
	// The step is WAITING_FOR_GPU from the submission on; the message
	// comes from the admission workflow, so the workload is queued then.
	e.waitRun(id, 60*time.Second, "the shared cluster waiting for GPUs", func(r gen.Run) bool {
		return r.Status != nil && len(r.Status.Steps) > 0 && r.Status.Steps[0].State == gen.StepStateWAITINGFORGPU &&
			strings.HasPrefix(val(r.Status.Steps[0].Message), "waiting for GPUs: ")
	})
	assert.Empty(t, e.runObjects(t, id), "the shared cluster must not exist before it is admitted")
	q := e.admissionQueue(t)
	require.Len(t, q.Pending, 1)
	assert.Equal(t, id+"/raycluster-shared", q.Pending[0].Workload)

	// Admitted once a holder ends: the cluster's GPU workers are pinned
	// to the nodes admission chose.
	require.Eventually(t, func() bool {
		rcs, err := e.ray.RayV1().RayClusters(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/run=" + id})
		if err != nil || len(rcs.Items) != 1 {
			return false
		}
		aff := rcs.Items[0].Spec.WorkerGroupSpecs[0].Template.Spec.Affinity
		require.NotNil(t, aff, "the shared cluster's GPU workers are not pinned to their admitted nodes")
		return true
	}, 120*time.Second, 100*time.Millisecond, "the shared cluster was never created")

	r := e.waitTerminal(id, 180*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	for _, h := range holders {
		require.Equal(t, gen.RunStateSUCCEEDED, e.waitTerminal(h, 60*time.Second).State)
	}
	rcs, err := e.ray.RayV1().RayClusters(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: "atelier.dev/run=" + id})
	require.NoError(t, err)
	assert.Empty(t, rcs.Items, "the shared cluster is deleted when the run ends")
	final := e.admissionQueue(t)
	assert.Empty(t, final.Pending)
	assert.Empty(t, final.Running, "the run's end gave the shared cluster's GPUs back")
}

// createSharedL4Pipeline stores a pipeline whose ray steps (run one after
// the other) share a RayCluster with one single-L4 worker.
func (e *kubeEnv) createSharedL4Pipeline(name string, steps ...string) {
	var b strings.Builder
	fmt.Fprintf(&b, `rayClusters:
  - name: shared
    placement: {cluster: %s}
    image: rayproject/ray:2.9.0
    workers: [{name: gpu, replicas: 1, gpu: 1, gpuType: %s}]
steps:
`, e.cluster, kubetest.L4)
	for i, s := range steps {
		fmt.Fprintf(&b, "  - name: %s\n    kind: ray\n", s)
		if i > 0 {
			fmt.Fprintf(&b, "    dependsOn: [%s]\n", steps[i-1])
		}
		fmt.Fprintf(&b, "    ray: {entrypoint: python %s.py, cluster: shared}\n", s)
	}
	e.createPipeline(name, b.String())
}

// A forEach of GPU items (a sweep) goes through admission in batches: the
// run chooses the items' cluster and submits their workloads in one
// activity each, is told in one signal per decision round which items are
// admitted and why the others wait, and gives GPUs back in batch signals.
// The quota bounds how many items run at once; every item succeeds.
func TestGPUForEachItemsAreAdmittedInBatches(t *testing.T) {
	e := newKubeEnv(t, func(string) kubetest.Exit {
		return kubetest.Exit{After: 3 * time.Second, Message: `{}`}
	}, true)
	e.setupL4Admission(t, "one-l4", 0) // a quota of two L4s
	e.createL4Sweep("sweep")
	id := e.start("sweep", nil)
	e.waitRun(id, 60*time.Second, "two items running, three waiting for the quota with a reason", func(r gen.Run) bool {
		if r.Status == nil || len(r.Status.Steps) == 0 || r.Status.Steps[0].Items == nil {
			return false
		}
		running, waiting := 0, 0
		for _, it := range *r.Status.Steps[0].Items {
			switch {
			case it.State == gen.StepStateRUNNING:
				running++
			case it.State == gen.StepStateWAITINGFORGPU && strings.HasPrefix(val(it.Message), "waiting for GPUs: "):
				waiting++
			}
		}
		return running == 2 && waiting == 3
	})
	q := e.admissionQueue(t)
	assert.Len(t, q.Running, 2)
	assert.Len(t, q.Pending, 3)

	r := e.waitTerminal(id, 180*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	for i, it := range val(r.Status.Steps[0].Items) {
		assert.Equal(t, gen.StepStateSUCCEEDED, it.State, "item %d", i)
		assert.Len(t, val(it.Attempts), 1, "item %d", i)
	}
	final := e.admissionQueue(t)
	assert.Empty(t, final.Pending)
	assert.Empty(t, final.Running, "every item gave its GPU back")

	// What travelled: batches, not a message per item.
	activitiesRun, signals := map[string]int{}, map[string]int{}
	iter := e.temporal.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			activitiesRun[a.GetActivityType().GetName()]++
		}
		if s := ev.GetWorkflowExecutionSignaledEventAttributes(); s != nil {
			signals[s.GetSignalName()]++
		}
		if s := ev.GetSignalExternalWorkflowExecutionInitiatedEventAttributes(); s != nil {
			signals["out:"+s.GetSignalName()]++
		}
	}
	t.Logf("activities %v, signals %v", activitiesRun, signals)
	assert.Zero(t, activitiesRun[activities.SubmitWorkloadName]+activitiesRun[activities.SelectClusterName], "no per-item selection or submission")
	assert.Equal(t, 1, activitiesRun[activities.SelectClustersName], "the five items' cluster is chosen in one activity")
	assert.Equal(t, 1, activitiesRun[activities.SubmitWorkloadsName], "the five items are submitted in one activity")
	assert.Zero(t, signals[activities.SignalGPUAdmitted]+signals[activities.SignalGPUWaiting], "no per-item answer")
	assert.Positive(t, signals[activities.SignalGPUUpdates])
	assert.Less(t, signals[activities.SignalGPUUpdates], 5, "answers come per decision round, not per item")
	assert.Positive(t, signals["out:"+activities.SignalAdmissionRequest])
	assert.LessOrEqual(t, signals["out:"+activities.SignalAdmissionRequest], 5, "at most one release signal per item")
}
