package admission_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/platform/telemetry/telemetrytest"
	"github.com/atelier-ml/atelier/workflows/admission"
)

// The admission workflow admits what fits, tells runs why the rest waits
// (once per reason), admits the next when GPUs are given back, and
// continues as new with its queue.
func TestAdmissionWorkflowAdmitsInOrderAndOnRelease(t *testing.T) {
	for _, pending := range []int{500, 1} {
		t.Run(fmt.Sprintf("at most %d signals in flight", pending), func(t *testing.T) {
			defer func(old int) { admission.MaxPendingSignals = old }(admission.MaxPendingSignals)
			admission.MaxPendingSignals = pending
			testAdmissionWorkflow(t)
		})
	}
}

func testAdmissionWorkflow(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	reg := prometheus.NewRegistry()
	s.SetMetricsHandler(telemetry.NewSDKHandler(reg, telemetry.Options{}))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(admission.Workflow, workflow.RegisterOptions{Name: activities.AdmissionWorkflowName})
	loads := 0
	env.RegisterActivityWithOptions(func(ctx context.Context, _ activities.AdmissionSnapshotRequest) (activities.AdmissionSnapshot, error) {
		loads++
		return activities.AdmissionSnapshot{
			Inventory: gpu.Inventory{Nodes: []gpu.Node{{Name: "n1", GPUType: "L4", GPUs: 2, Ready: true}}},
			Policy:    gpu.Policy{Projects: []gpu.ProjectPolicy{{Name: "p", Quotas: []gpu.Quota{{Resource: "L4", Nominal: 2}}}}},
		}, nil
	}, activity.RegisterOptions{Name: activities.LoadAdmissionSnapshotName})

	var mu sync.Mutex
	told := map[string][]string{} // run → signals received
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", mock.Anything, mock.Anything).
		Return(func(_, run, _, name string, arg any) error {
			mu.Lock()
			defer mu.Unlock()
			switch a := arg.(type) {
			case activities.GPUAdmitted:
				told[run] = append(told[run], name+" "+a.Workload)
			case activities.GPUWaiting:
				told[run] = append(told[run], name+" "+a.Workload+": "+a.Message)
			}
			return nil
		})
	submit := func(run string, gpus int) {
		env.SignalWorkflow(activities.SignalAdmissionRequest, activities.AdmissionRequest{Op: activities.AdmissionSubmit, Run: run, Step: "train",
			Workload: gpu.Workload{ID: run + "/train", Project: "p", PodSets: []gpu.PodSet{{Name: "step", Count: 1, Per: gpus, Resource: "L4"}}}})
	}
	env.RegisterDelayedCallback(func() { submit("r1", 1); submit("r2", 1); submit("r3", 1) }, time.Second)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(activities.QueryAdmissionQueue)
		require.NoError(t, err)
		var q activities.AdmissionQueue
		require.NoError(t, v.Get(&q))
		require.Len(t, q.Running, 2)
		require.Len(t, q.Pending, 1)
		assert.Equal(t, "r3", q.Pending[0].Run)
		assert.Equal(t, string(gpu.WaitQuota), q.Pending[0].Reason)
		assert.Equal(t, []gpu.Amount{{Resource: "L4", Units: 1}}, q.Pending[0].GPUs)
		// r1 ends: r3 gets its GPU.
		env.SignalWorkflow(activities.SignalAdmissionRequest, activities.AdmissionRequest{Op: activities.AdmissionRelease, Workload: gpu.Workload{ID: "r1/train"}})
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(activities.QueryAdmissionQueue)
		require.NoError(t, err)
		var q activities.AdmissionQueue
		require.NoError(t, v.Get(&q))
		assert.Empty(t, q.Pending)
		assert.Len(t, q.Running, 2)
		env.CancelWorkflow()
	}, 2*time.Minute)
	env.ExecuteWorkflow(activities.AdmissionWorkflowName, activities.AdmissionInput{Cluster: "east"})

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{activities.SignalGPUAdmitted + " r1/train"}, told["r1"])
	assert.Equal(t, []string{activities.SignalGPUAdmitted + " r2/train"}, told["r2"])
	require.Len(t, told["r3"], 2, "r3: told why it waits once, then admitted: %v", told["r3"])
	assert.Contains(t, told["r3"][0], activities.SignalGPUWaiting+" r3/train: quota")
	assert.Equal(t, activities.SignalGPUAdmitted+" r3/train", told["r3"][1])
	assert.Positive(t, loads)

	v, err := telemetrytest.Gather(reg)
	require.NoError(t, err)
	series := telemetrytest.Series
	assert.Equal(t, 3.0, v[series("atelier_gpu_workloads_submitted_total", "cluster", "east")], "%v", v)
	assert.Equal(t, 3.0, v[series("atelier_gpu_workloads_admitted_total", "cluster", "east")])
	assert.Equal(t, 0.0, v[series("atelier_gpu_queue_length", "cluster", "east")])
	assert.Equal(t, 2.0, v[series("atelier_gpu_workloads_running", "cluster", "east")])
}

// A run terminated through Temporal never releases its workload: the
// admission workflow frees it once the catalogue shows the run ended.
func TestAdmissionWorkflowFreesWhatEndedRunsHeld(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(admission.Workflow, workflow.RegisterOptions{Name: activities.AdmissionWorkflowName})
	var asked [][]string
	env.RegisterActivityWithOptions(func(ctx context.Context, req activities.AdmissionSnapshotRequest) (activities.AdmissionSnapshot, error) {
		asked = append(asked, req.Runs)
		snap := activities.AdmissionSnapshot{
			Inventory: gpu.Inventory{Nodes: []gpu.Node{{Name: "n1", GPUType: "L4", GPUs: 1, Ready: true}}},
			Policy:    gpu.Policy{Projects: []gpu.ProjectPolicy{{Name: "p", Quotas: []gpu.Quota{{Resource: "L4", Nominal: 1}}}}},
		}
		if len(asked) > 1 {
			snap.EndedRuns = []string{"r1"} // terminated meanwhile
		}
		return snap, nil
	}, activity.RegisterOptions{Name: activities.LoadAdmissionSnapshotName})
	admitted := map[string]bool{}
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", mock.Anything, mock.Anything).
		Return(func(_, run, _, name string, _ any) error {
			if name == activities.SignalGPUAdmitted {
				admitted[run] = true
			}
			return nil
		})
	env.RegisterDelayedCallback(func() {
		for _, run := range []string{"r1", "r2"} {
			env.SignalWorkflow(activities.SignalAdmissionRequest, activities.AdmissionRequest{Op: activities.AdmissionSubmit, Run: run, Step: "s",
				Workload: gpu.Workload{ID: run + "/s", Project: "p", PodSets: []gpu.PodSet{{Name: "s", Count: 1, Per: 1, Resource: "L4"}}}})
		}
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		require.True(t, admitted["r1"])
		require.True(t, admitted["r2"], "r2 still waits for the GPU the ended run r1 held")
		env.CancelWorkflow()
	}, 3*admission.Refresh)
	env.ExecuteWorkflow(activities.AdmissionWorkflowName, activities.AdmissionInput{Cluster: "east"})
	require.GreaterOrEqual(t, len(asked), 2)
	assert.Equal(t, []string{"r1"}, asked[1], "the refresh asks about the runs holding GPUs")
}

// Workloads submitted in a batch are answered grouped: one
// SignalGPUUpdates per run per decision round, carrying every admission
// and wait reason of that round; a run that cannot be signalled frees
// every workload the signal admitted.
func TestAdmissionWorkflowAnswersABatchInOneSignalPerRun(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(admission.Workflow, workflow.RegisterOptions{Name: activities.AdmissionWorkflowName})
	env.RegisterActivityWithOptions(func(ctx context.Context, _ activities.AdmissionSnapshotRequest) (activities.AdmissionSnapshot, error) {
		return activities.AdmissionSnapshot{
			Inventory: gpu.Inventory{Nodes: []gpu.Node{{Name: "n1", GPUType: "L4", GPUs: 8, Ready: true}}},
			Policy:    gpu.Policy{Projects: []gpu.ProjectPolicy{{Name: "p", Quotas: []gpu.Quota{{Resource: "L4", Nominal: 3}}}}},
		}, nil
	}, activity.RegisterOptions{Name: activities.LoadAdmissionSnapshotName})
	var mu sync.Mutex
	updates := map[string][]activities.GPUUpdates{}
	var other []string
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", mock.Anything, mock.Anything).
		Return(func(_, run, _, name string, arg any) error {
			mu.Lock()
			defer mu.Unlock()
			if name != activities.SignalGPUUpdates {
				other = append(other, name)
				return nil
			}
			if run == "gone" {
				return fmt.Errorf("workflow execution already completed")
			}
			updates[run] = append(updates[run], arg.(activities.GPUUpdates))
			return nil
		})
	batch := func(run string, items int) activities.AdmissionRequest {
		req := activities.AdmissionRequest{Op: activities.AdmissionBatch}
		for i := range items {
			req.Requests = append(req.Requests, activities.AdmissionRequest{Op: activities.AdmissionSubmit, Run: run, Step: "train",
				Workload: gpu.Workload{ID: fmt.Sprintf("%s/train/%d", run, i), Project: "p", PodSets: []gpu.PodSet{{Name: "step", Count: 1, Per: 1, Resource: "L4"}}}})
		}
		return req
	}
	queue := func() activities.AdmissionQueue {
		v, err := env.QueryWorkflow(activities.QueryAdmissionQueue)
		require.NoError(t, err)
		var q activities.AdmissionQueue
		require.NoError(t, v.Get(&q))
		return q
	}
	// A run that is gone by the time it is answered gives back at once
	// what it was admitted: r1's items then fit.
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(activities.SignalAdmissionRequest, batch("gone", 2)) }, time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(activities.SignalAdmissionRequest, batch("r1", 4)) }, 2*time.Second)
	env.RegisterDelayedCallback(func() {
		q := queue()
		assert.Len(t, q.Running, 3)
		require.Len(t, q.Pending, 1)
		// Releases travel in batches too.
		env.SignalWorkflow(activities.SignalAdmissionRequest, activities.AdmissionRequest{Op: activities.AdmissionBatch, Requests: []activities.AdmissionRequest{
			{Op: activities.AdmissionRelease, Workload: gpu.Workload{ID: "r1/train/0"}},
			{Op: activities.AdmissionRelease, Workload: gpu.Workload{ID: "r1/train/1"}},
		}})
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		q := queue()
		assert.Empty(t, q.Pending)
		assert.Len(t, q.Running, 2)
		env.CancelWorkflow()
	}, 2*time.Minute)
	env.ExecuteWorkflow(activities.AdmissionWorkflowName, activities.AdmissionInput{Cluster: "east"})

	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, other, "a batch's workloads are answered in SignalGPUUpdates only")
	r1 := updates["r1"]
	require.Len(t, r1, 2, "r1: one signal for its first round (three admitted, one waiting), one when the last is admitted: %+v", r1)
	assert.Len(t, r1[0].Admitted, 3)
	require.Len(t, r1[0].Waiting, 1)
	assert.Equal(t, "r1/train/3", r1[0].Waiting[0].Workload)
	assert.Contains(t, r1[0].Waiting[0].Message, "quota")
	require.Len(t, r1[1].Admitted, 1)
	assert.Equal(t, "r1/train/3", r1[1].Admitted[0].Workload)
}
