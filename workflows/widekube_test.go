package workflows_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// callsLike counts the fake clusters' calls that start with prefix.
func (f *fakeClusters) callsLike(prefix string) (n int, others []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		switch {
		case strings.HasPrefix(c, prefix):
			n++
		case strings.HasPrefix(c, strings.Fields(prefix)[0]+" "):
			others = append(others, c)
		}
	}
	return n, others
}

// A wide container step with a placement: the pipeline workflow chooses
// the cluster once, every item runs as a Job there from the batches (no
// selection per item, nothing local), the items' records carry the
// cluster, a reducer reads their outputs, and the run's end sweeps the
// cluster once (the batches never do).
func TestWideKubeItemsRunAsJobsOnTheStepsCluster(t *testing.T) {
	env, rt, st := newWideEnv(t)
	var mu sync.Mutex
	deleteAfter := map[time.Duration]int{}
	fc := &fakeClusters{outputs: func(req activities.KubeStepRequest) map[string]any {
		mu.Lock()
		deleteAfter[req.DeleteAfter]++
		mu.Unlock()
		if req.Item == nil {
			return map[string]any{"ok": true}
		}
		return map[string]any{"v": *req.Item}
	}}
	fc.register(env)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, kubeInput(t, `
steps:
  - name: fan
    placement: {cluster: cpu-west}
    forEach: {items: "0..1499", parallelism: 200}
    container: {image: busybox, command: ["echo", "{{ item }}"]}
  - name: total
    container: {command: ["ok sum={{ sum(map(steps.fan.outputs, .v)) }} n={{ len(steps.fan.outputs) }}"]}
`))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	s := status(t, env)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)
	fan := wideStep(s, "fan")
	require.NotNil(t, fan.Wide)
	assert.Equal(t, runstate.ItemCounts{Succeeded: 1500}, fan.Wide.Counts)
	assert.Greater(t, fan.Wide.Batches, 1)
	assert.Equal(t, "test", fan.Message, "why the cluster was chosen, on the step")

	selects, other := fc.callsLike("select default-test-taskqueue-control fan")
	assert.Equal(t, 1, selects, "one selection for the step, none per item: %v", other)
	assert.Empty(t, other)
	steps, elsewhere := fc.callsLike("step atelier-k8s-cpu-west job:fan:")
	assert.Equal(t, 1500, steps)
	assert.Empty(t, elsewhere, "every item on the chosen cluster's queue")
	cleanups, _ := fc.callsLike("cleanup ")
	assert.Equal(t, 1, cleanups, "the run's end sweeps the cluster once; batches never sweep")
	assert.Contains(t, fc.calls, "cleanup atelier-k8s-cpu-west-control default-test-workflow-id")
	assert.Equal(t, "cleanup", strings.Fields(fc.calls[len(fc.calls)-1])[0], "the sweep comes after every item")

	assert.Equal(t, []string{fmt.Sprintf("ok sum=%d n=1500", 1499*1500/2)}, rt.commands(), "only the reducer ran locally")
	assert.Equal(t, map[time.Duration]int{workflows.WideJobTTL: 1500}, deleteAfter, "every item's Job deletes itself after it finished")
	rows := st.rows[s.RunID+"/fan"]
	require.Len(t, rows, 1500)
	r := rows[42]
	assert.Equal(t, runstate.StepSucceeded, r.State)
	assert.Equal(t, map[string]any{"v": 42.0}, r.Outputs)
	require.Len(t, r.Attempts, 1)
	assert.Equal(t, "cpu-west", r.Attempts[0].Cluster)
	assert.Equal(t, "job/fan -n atelier-p1", r.Attempts[0].Object)
	assert.Empty(t, r.Message, "the cluster's reason is on the step, not on 1,500 items")
}

// The pipeline's default placement places a wide step too.
func TestWideKubePipelinePlacement(t *testing.T) {
	env, rt, _ := newWideEnv(t)
	fc := &fakeClusters{}
	fc.register(env)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, kubeInput(t, `
placement: {cluster: gpu-east}
steps:
  - name: fan
    forEach: {items: "0..1100"}
    container: {image: busybox, command: ["true"]}
`))
	require.NoError(t, env.GetWorkflowError())
	s := status(t, env)
	require.Equal(t, runstate.Succeeded, s.State, s.Error)
	n, other := fc.callsLike("step atelier-k8s-gpu-east job:fan:")
	assert.Equal(t, 1101, n)
	assert.Empty(t, other)
	assert.Empty(t, rt.calls)
}

// Cancelling the run cancels the batches' running Jobs (their activities,
// which delete them) and sweeps the cluster; no item starts after it.
func TestWideKubeCancel(t *testing.T) {
	env, _, st := newWideEnv(t)
	fc := &fakeClusters{block: true}
	fc.register(env)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(runstate.SignalCancel, runstate.CancelRequest{Reason: "enough", Requester: "alice"})
	}, 5*time.Second)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, kubeInput(t, `
steps:
  - name: fan
    placement: {cluster: cpu-west}
    forEach: {items: "0..2999", parallelism: 300}
    container: {image: busybox, command: ["sleep", "600"]}
`))
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Cancelled, s.State)
	fan := wideStep(s, "fan")
	assert.Equal(t, runstate.StepCancelled, fan.State)
	assert.Equal(t, 300, fan.Wide.Counts.Cancelled, "every running item is cancelled")
	assert.Equal(t, 2700, fan.Wide.Counts.NotRun)
	n, _ := fc.callsLike("step atelier-k8s-cpu-west job:fan:")
	assert.Equal(t, 300, n, "no item starts after the cancel")
	assert.Equal(t, 300, st.states(s.RunID + "/fan")[runstate.StepCancelled])
	assert.Contains(t, fc.calls, "cleanup atelier-k8s-cpu-west-control default-test-workflow-id")
}

// No cluster matches: the step fails once, with the registry's reason,
// before any batch starts.
func TestWideKubeNoCluster(t *testing.T) {
	env, _, st := newWideEnv(t)
	fc := &fakeClusters{noCluster: true}
	fc.register(env)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, kubeInput(t, `
steps:
  - name: fan
    placement: {cluster: nowhere}
    forEach: {items: "0..1100"}
    container: {image: busybox, command: ["true"]}
`))
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	fan := wideStep(s, "fan")
	assert.Equal(t, runstate.StepFailed, fan.State)
	assert.Contains(t, fan.Error, "no registered cluster matches the placement")
	n, _ := fc.callsLike("step ")
	assert.Zero(t, n)
	assert.Empty(t, st.rows)
}

// What a wide step still cannot run fails the step at once, saying why
// and what to do.
func TestWideKubeRefusals(t *testing.T) {
	for _, tc := range []struct{ name, step, want string }{
		{"gpu", `placement: {cluster: gpu-east}
    container: {image: busybox, command: ["true"], resources: {gpu: 1}}`,
			"a forEach over more than 1000 items cannot request GPUs on a cluster yet (container.resources.gpu: 1; each item would need its own GPU admission)"},
		{"ray", `kind: ray
    ray: {entrypoint: python x.py, image: rayproject/ray:2.9.0}`,
			"a forEach over more than 1000 items runs container steps only (this is a ray step"},
		{"spark", `kind: spark
    spark: {type: Python, image: spark:3.5.0, mainApplicationFile: "local:///x.py"}`,
			"runs container steps only (this is a spark step"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _, _ := newWideEnv(t)
			fc := &fakeClusters{}
			fc.register(env)
			env.ExecuteWorkflow(runstate.PipelineWorkflowName, kubeInput(t, `
steps:
  - name: fan
    forEach: {items: "0..1100"}
    `+tc.step+`
`))
			require.True(t, env.IsWorkflowCompleted())
			s := status(t, env)
			assert.Equal(t, runstate.Failed, s.State)
			assert.Contains(t, wideStep(s, "fan").Error, tc.want)
			assert.Contains(t, wideStep(s, "fan").Error, "use fewer items")
			n, _ := fc.callsLike("step ")
			assert.Zero(t, n)
		})
	}
}

// A run from before wide steps on clusters (atelier.wide-kube at its
// default version) fails the step where it failed then, with the same
// message, choosing no cluster.
func TestWideKubeOldRunsStillRefuse(t *testing.T) {
	env, _, _ := newWideEnv(t)
	fc := &fakeClusters{}
	fc.register(env)
	env.OnGetVersion("atelier.wide-kube", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, kubeInput(t, `
steps:
  - name: fan
    placement: {cluster: cpu-west}
    forEach: {items: "0..1100"}
    container: {image: busybox, command: ["true"]}
`))
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	assert.Equal(t, "a forEach over more than 1000 items runs container steps on the local runtime only (this is a container step with a placement); use fewer items or split the list", wideStep(s, "fan").Error)
	assert.Empty(t, fc.calls)
}
