package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// fakeClusters stands in for the cluster registry and the per-cluster
// Kubernetes workers: it records which activity ran on which task queue.
type fakeClusters struct {
	mu       sync.Mutex
	calls    []string // "<activity> <task queue> <detail>"
	failStep string
	block    bool
	// cleanupGone: no worker ever runs the cleanup (its cluster's worker
	// is gone).
	cleanupGone bool
	// admission answers GPU submissions (nil: admission off).
	admission func(activities.SubmitWorkloadRequest) (activities.SubmitWorkloadResult, error)
	// noCluster: no registered cluster matches any placement.
	noCluster bool
	// batches are the sizes of the batched submissions.
	batches []int
	// selectBatches counts batched selections.
	selectBatches int
	// outputs, when set, are a step object's outputs (default {"ok": true}).
	outputs func(activities.KubeStepRequest) map[string]any
}

func (f *fakeClusters) record(ctx context.Context, name, detail string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name+" "+activity.GetInfo(ctx).TaskQueue+" "+detail)
}

func (f *fakeClusters) register(env *testsuite.TestWorkflowEnvironment) {
	choose := func(req activities.SelectClusterRequest) activities.SelectClusterOutcome {
		if f.noCluster {
			return activities.SelectClusterOutcome{NoCluster: "no registered cluster matches the placement"}
		}
		c := "gpu-east"
		if req.Placement != nil && req.Placement.Cluster != "" {
			c = req.Placement.Cluster
		}
		return activities.SelectClusterOutcome{SelectClusterResult: activities.SelectClusterResult{Cluster: c, TaskQueue: activities.TaskQueueForCluster(c), Reason: "test"}}
	}
	env.RegisterActivityWithOptions(func(ctx context.Context, req activities.SelectClusterRequest) (activities.SelectClusterResult, error) {
		f.record(ctx, "select", req.Step)
		out := choose(req)
		if out.NoCluster != "" {
			return activities.SelectClusterResult{}, temporal.NewNonRetryableApplicationError(out.NoCluster, activities.ErrTypeNoCluster, nil)
		}
		return out.SelectClusterResult, nil
	}, activity.RegisterOptions{Name: activities.SelectClusterName})
	env.RegisterActivityWithOptions(func(ctx context.Context, req activities.SelectClustersRequest) (activities.SelectClustersResult, error) {
		var out activities.SelectClustersResult
		f.mu.Lock()
		f.selectBatches++
		f.mu.Unlock()
		for _, r := range req.Requests {
			f.record(ctx, "select", r.Step)
			out.Results = append(out.Results, choose(r))
		}
		return out, nil
	}, activity.RegisterOptions{Name: activities.SelectClustersName})
	env.RegisterActivityWithOptions(func(ctx context.Context, req activities.EnsureRayClusterRequest) (activities.EnsureRayClusterResult, error) {
		f.record(ctx, "ensure", req.Cluster.Name)
		return activities.EnsureRayClusterResult{Namespace: "atelier-p1", Name: "rc-" + req.Cluster.Name}, nil
	}, activity.RegisterOptions{Name: activities.EnsureRayClusterName})
	env.RegisterActivityWithOptions(func(ctx context.Context, req activities.KubeStepRequest) (activities.KubeStepResult, error) {
		f.record(ctx, "step", string(req.Kind)+":"+req.Step+":"+req.RayClusterName)
		res := activities.KubeStepResult{Namespace: "atelier-p1", Object: string(req.Kind) + "/" + req.Step}
		res.Outputs = map[string]any{"ok": true}
		if f.outputs != nil {
			res.Outputs = f.outputs(req)
		}
		if req.Step == f.failStep {
			return res, temporal.NewNonRetryableApplicationError("RayJob x failed: AppFailed: boom", activities.ErrTypeStepFailed, nil, res)
		}
		for f.block {
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(50 * time.Millisecond):
				activity.RecordHeartbeat(ctx)
			}
		}
		return res, nil
	}, activity.RegisterOptions{Name: activities.RunKubeStepName})
	env.RegisterActivityWithOptions(func(ctx context.Context, req activities.CleanupRunObjectsRequest) (activities.CleanupRunObjectsResult, error) {
		f.record(ctx, "cleanup", req.RunID)
		if f.cleanupGone {
			<-ctx.Done()
			return activities.CleanupRunObjectsResult{}, ctx.Err()
		}
		return activities.CleanupRunObjectsResult{}, nil
	}, activity.RegisterOptions{Name: activities.CleanupRunObjectsName})
	// GPU admission off (no GPU policy): GPU steps run at once.
	env.RegisterActivityWithOptions(func(ctx context.Context, req activities.SubmitWorkloadRequest) (activities.SubmitWorkloadResult, error) {
		if f.admission != nil {
			return f.admission(req)
		}
		return activities.SubmitWorkloadResult{Queued: false}, nil
	}, activity.RegisterOptions{Name: activities.SubmitWorkloadName})
	env.RegisterActivityWithOptions(func(ctx context.Context, req activities.SubmitWorkloadsRequest) (activities.SubmitWorkloadsResult, error) {
		f.mu.Lock()
		f.batches = append(f.batches, len(req.Requests))
		f.mu.Unlock()
		var out activities.SubmitWorkloadsResult
		for _, r := range req.Requests {
			var res activities.SubmitWorkloadResult
			if f.admission != nil {
				var err error
				if res, err = f.admission(r); err != nil {
					var app *temporal.ApplicationError
					if errors.As(err, &app) && app.Type() == activities.ErrTypeInvalidStep {
						out.Results = append(out.Results, activities.SubmitWorkloadOutcome{Refused: app.Message()})
						continue
					}
					return out, err
				}
			}
			out.Results = append(out.Results, activities.SubmitWorkloadOutcome{SubmitWorkloadResult: res})
		}
		return out, nil
	}, activity.RegisterOptions{Name: activities.SubmitWorkloadsName})
}

const kubePipeline = `
rayClusters:
  - name: shared
    image: rayproject/ray:2.9.0
steps:
  - name: etl
    kind: spark
    spark: {type: Python, image: spark:3.5.0, mainApplicationFile: "local:///etl.py"}
  - name: train
    kind: ray
    dependsOn: [etl]
    ray:
      entrypoint: python train.py
      image: rayproject/ray:2.9.0
      workers: [{name: gpu, replicas: 2, gpu: 1, gpuType: NVIDIA-A100}]
  - name: eval-a
    kind: ray
    dependsOn: [train]
    ray: {entrypoint: python eval.py a, cluster: shared}
  - name: eval-b
    kind: ray
    dependsOn: [train]
    ray: {entrypoint: python eval.py b, cluster: shared}
  - name: report
    dependsOn: [eval-a, eval-b]
    placement: {cluster: cpu-west}
    container: {image: busybox, command: ["echo", "done"]}
  - name: local-note
    dependsOn: [report]
    container: {command: ["ok"]}
`

func TestKubeStepsRouteToClusterQueuesAndCleanUp(t *testing.T) {
	env, rt, _ := newEnv(t)
	fc := &fakeClusters{}
	fc.register(env)
	in := kubeInput(t, kubePipeline)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	s := status(t, env)
	assert.Equal(t, runstate.Succeeded, s.State)
	assert.Equal(t, []string{"ok"}, rt.commands(), "only the unplaced container step ran locally")
	calls := fc.calls
	assert.Contains(t, calls, "step atelier-k8s-gpu-east sparkapp:etl:")
	assert.Contains(t, calls, "step atelier-k8s-gpu-east rayjob:train:")
	assert.Contains(t, calls, "step atelier-k8s-gpu-east rayjob:eval-a:rc-shared")
	assert.Contains(t, calls, "step atelier-k8s-cpu-west job:report:")
	ensures := 0
	for _, c := range calls {
		if c == "ensure atelier-k8s-gpu-east shared" {
			ensures++
		}
	}
	assert.Equal(t, 1, ensures, "the shared RayCluster is created once: %v", calls)
	assert.Contains(t, calls, "cleanup atelier-k8s-gpu-east-control default-test-workflow-id")
	assert.Contains(t, calls, "cleanup atelier-k8s-cpu-west-control default-test-workflow-id")
	train := s.Steps[1]
	require.Len(t, train.Attempts, 1)
	assert.Equal(t, "gpu-east", train.Attempts[0].Cluster)
	assert.Equal(t, "rayjob/train -n atelier-p1", train.Attempts[0].Object)
}

func TestKubeStepFailureAndCancelStillCleanUp(t *testing.T) {
	t.Run("failure", func(t *testing.T) {
		env, _, _ := newEnv(t)
		fc := &fakeClusters{failStep: "train"}
		fc.register(env)
		env.ExecuteWorkflow(runstate.PipelineWorkflowName, kubeInput(t, kubePipeline))
		require.True(t, env.IsWorkflowCompleted())
		s := status(t, env)
		assert.Equal(t, runstate.Failed, s.State)
		assert.Contains(t, s.Steps[1].Error, "AppFailed: boom")
		assert.Contains(t, fc.calls, "cleanup atelier-k8s-gpu-east-control default-test-workflow-id")
	})
	t.Run("cancel", func(t *testing.T) {
		env, _, _ := newEnv(t)
		fc := &fakeClusters{block: true}
		fc.register(env)
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(runstate.SignalCancel, runstate.CancelRequest{Reason: "stop", Requester: "bob"})
		}, 2*time.Second)
		env.SetTestTimeout(30 * time.Second)
		env.ExecuteWorkflow(runstate.PipelineWorkflowName, kubeInput(t, kubePipeline))
		require.True(t, env.IsWorkflowCompleted())
		s := status(t, env)
		assert.Equal(t, runstate.Cancelled, s.State)
		assert.Equal(t, runstate.StepCancelled, s.Steps[0].State)
		assert.Contains(t, fc.calls, "cleanup atelier-k8s-gpu-east-control default-test-workflow-id")
	})
}

// A native Go pipeline reaches the same backends through Run.Ray, Run.Spark,
// Run.RayCluster and WithPlacement.
func goKubePipeline(ctx workflow.Context, _ struct{}) (string, error) {
	run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{})
	if err != nil {
		return "", err
	}
	run.RayCluster(pipeline.SharedRayCluster{Name: "shared", RayClusterTemplate: pipeline.RayClusterTemplate{Image: "rayproject/ray:2.9.0"}})
	_, err = run.Spark(ctx, "etl", pipeline.SparkStep{Type: "Python", Image: "spark", MainApplicationFile: "local:///etl.py"}).Get(ctx)
	if err == nil {
		_, err = run.Ray(ctx, "train", pipeline.RayStep{Entrypoint: "python train.py", RayClusterTemplate: pipeline.RayClusterTemplate{Image: "ray"}}).Get(ctx)
	}
	if err == nil {
		_, err = run.Ray(ctx, "eval", pipeline.RayStep{Entrypoint: "python eval.py", Cluster: "shared"}).Get(ctx)
	}
	if err == nil {
		_, err = run.Container(ctx, "report", pipeline.Container{Image: "busybox", Command: []string{"true"}},
			workflows.WithPlacement(&pipeline.Placement{Cluster: "cpu-west"})).Get(ctx)
	}
	return "done", run.End("done", err)
}

func TestGoPipelineKubeSteps(t *testing.T) {
	env, rt, _ := newEnv(t)
	env.RegisterWorkflowWithOptions(goKubePipeline, workflow.RegisterOptions{Name: "test.GoKube"})
	fc := &fakeClusters{}
	fc.register(env)
	env.ExecuteWorkflow("test.GoKube", struct{}{})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	assert.Empty(t, rt.commands(), "nothing ran locally")
	assert.Contains(t, fc.calls, "step atelier-k8s-gpu-east sparkapp:etl:")
	assert.Contains(t, fc.calls, "step atelier-k8s-gpu-east rayjob:eval:rc-shared")
	assert.Contains(t, fc.calls, "step atelier-k8s-cpu-west job:report:")
	assert.Contains(t, fc.calls, "cleanup atelier-k8s-cpu-west-control default-test-workflow-id")
}

// Seen by a user: a run that used a cluster whose worker has gone never
// ended, waiting for its cleanup. It must end, saying what may be left.
func TestRunEndsWhenACleanupCannotRun(t *testing.T) {
	old := workflows.CleanupTimeout
	workflows.CleanupTimeout = 300 * time.Millisecond
	t.Cleanup(func() { workflows.CleanupTimeout = old })
	env, _, _ := newEnv(t)
	env.SetTestTimeout(30 * time.Second)
	fc := &fakeClusters{cleanupGone: true}
	fc.register(env)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, kubeInput(t, kubePipeline))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	s := status(t, env)
	assert.Equal(t, runstate.Succeeded, s.State)
	require.Len(t, s.Warnings, 2, "one per cluster used")
	assert.Contains(t, s.Warnings[0], "may be left")
	assert.Contains(t, s.Warnings[0], "atelier.dev/run=default-test-workflow-id")
}

// A GPU step waits in WAITING_FOR_GPU, creating nothing, until its
// cluster's admission workflow admits it; it gives its GPUs back when it
// ends.
func TestGPUStepWaitsForAdmission(t *testing.T) {
	env, _, _ := newEnv(t)
	fc := &fakeClusters{}
	var submitted activities.SubmitWorkloadRequest
	fc.admission = func(req activities.SubmitWorkloadRequest) (activities.SubmitWorkloadResult, error) {
		submitted = req
		return activities.SubmitWorkloadResult{Queued: true, Workload: req.Workload}, nil
	}
	fc.register(env)
	var released []activities.AdmissionRequest
	env.OnSignalExternalWorkflow(mock.Anything, activities.AdmissionWorkflowID("gpu-east"), "", activities.SignalAdmissionRequest, mock.Anything).
		Return(func(_, _, _, _ string, arg any) error {
			released = append(released, arg.(activities.AdmissionRequest).Requests...)
			return nil
		})
	env.RegisterDelayedCallback(func() {
		st := status(t, env).Steps[0]
		assert.Equal(t, runstate.StepWaitingForGPU, st.State)
		for _, c := range fc.calls {
			assert.False(t, strings.HasPrefix(c, "step "), "a step object was created while waiting: %s", c)
		}
		env.SignalWorkflow(activities.SignalGPUUpdates, activities.GPUUpdates{Waiting: []activities.GPUWaiting{{Workload: submitted.Workload.ID, Message: "quota: full"}}})
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		st := status(t, env).Steps[0]
		assert.Equal(t, "waiting for GPUs: quota: full", st.Message)
		env.SignalWorkflow(activities.SignalGPUUpdates, activities.GPUUpdates{Admitted: []activities.GPUAdmitted{{Workload: submitted.Workload.ID, Nodes: []string{"n1"}}}})
	}, 2*time.Minute)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, kubeInput(t, `
steps:
  - name: train
    placement: {cluster: gpu-east}
    container: {image: busybox, command: ["true"], resources: {gpu: 2, gpuType: NVIDIA-L4}}
`))
	require.NoError(t, env.GetWorkflowError())
	assert.Equal(t, runstate.Succeeded, status(t, env).State)
	assert.Equal(t, []gpu.PodSet{{Name: "step", Count: 1, Per: 2, Resource: "NVIDIA-L4"}}, submitted.Workload.PodSets)
	assert.Equal(t, submitted.Run+"/train", submitted.Workload.ID)
	require.Len(t, released, 1)
	assert.Equal(t, activities.AdmissionRelease, released[0].Op)
	assert.Equal(t, submitted.Workload.ID, released[0].Workload.ID)
	assert.Contains(t, fc.calls, "step atelier-k8s-gpu-east job:train:")
}

// Argo's loops over maps: a forEach item picks its container's image (and
// a parameter its tag), each item's Job getting its own.
func TestForEachItemsPickTheirImage(t *testing.T) {
	env, _, _ := newEnv(t)
	var mu sync.Mutex
	images := map[int]string{}
	fc := &fakeClusters{outputs: func(req activities.KubeStepRequest) map[string]any {
		mu.Lock()
		defer mu.Unlock()
		if req.Item != nil {
			images[*req.Item] = req.Container.Image
		}
		return map[string]any{"ok": true}
	}}
	fc.register(env)
	in := kubeInput(t, `
params:
  - {name: tag, type: string, default: "1.2"}
steps:
  - name: test
    placement: {cluster: cpu-west}
    forEach: {items: [{os: debian, py: "3.12"}, {os: alpine, py: "3.13"}]}
    container: {image: "python:{{ item.py }}-{{ item.os }}-{{ params.tag }}", command: ["pytest"]}
`)
	in.Params = map[string]any{"tag": "1.2"}
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, in)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	assert.Equal(t, runstate.Succeeded, status(t, env).State)
	assert.Equal(t, map[int]string{0: "python:3.12-debian-1.2", 1: "python:3.13-alpine-1.2"}, images)
}

// A step that declares metrics tells the cluster's worker so (the Job
// then runs under the launcher, which stores its $ATELIER_METRICS file):
// a step, a small forEach's items, and a Go pipeline's container with
// WithMetrics; a step that declares none does not.
func TestDeclaredMetricsReachTheKubeRequest(t *testing.T) {
	record := func(got map[string]bool, mu *sync.Mutex) func(activities.KubeStepRequest) map[string]any {
		return func(req activities.KubeStepRequest) map[string]any {
			mu.Lock()
			defer mu.Unlock()
			name := req.Step
			if req.Item != nil {
				name = fmt.Sprintf("%s[%d]", req.Step, *req.Item)
			}
			got[name] = req.Metrics
			return map[string]any{"ok": true}
		}
	}
	t.Run("spec", func(t *testing.T) {
		env, _, _ := newEnv(t)
		var mu sync.Mutex
		got := map[string]bool{}
		fc := &fakeClusters{outputs: record(got, &mu)}
		fc.register(env)
		env.ExecuteWorkflow(runstate.PipelineWorkflowName, kubeInput(t, `
steps:
  - name: train
    placement: {cluster: gpu-east}
    metrics: {loss: minimize}
    container: {image: trainer, command: ["fit"]}
  - name: sweep
    placement: {cluster: gpu-east}
    metrics: {accuracy: maximize}
    forEach: {items: [1, 2]}
    container: {image: trainer, command: ["fit", "{{ item }}"]}
  - name: report
    placement: {cluster: gpu-east}
    container: {image: busybox, command: ["true"]}
`))
		require.True(t, env.IsWorkflowCompleted())
		require.NoError(t, env.GetWorkflowError())
		assert.Equal(t, map[string]bool{"train": true, "sweep[0]": true, "sweep[1]": true, "report": false}, got)
	})
	t.Run("go", func(t *testing.T) {
		env, _, _ := newEnv(t)
		env.RegisterWorkflowWithOptions(func(ctx workflow.Context, _ struct{}) (string, error) {
			run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{})
			if err != nil {
				return "", err
			}
			on := workflows.WithPlacement(&pipeline.Placement{Cluster: "cpu-west"})
			_, err = run.Container(ctx, "train", pipeline.Container{Image: "trainer", Command: []string{"fit"}}, on, workflows.WithMetrics()).Get(ctx)
			if err == nil {
				_, err = run.Container(ctx, "report", pipeline.Container{Image: "busybox", Command: []string{"true"}}, on).Get(ctx)
			}
			return "done", run.End("done", err)
		}, workflow.RegisterOptions{Name: "test.GoKubeMetrics"})
		var mu sync.Mutex
		got := map[string]bool{}
		fc := &fakeClusters{outputs: record(got, &mu)}
		fc.register(env)
		env.ExecuteWorkflow("test.GoKubeMetrics", struct{}{})
		require.True(t, env.IsWorkflowCompleted())
		require.NoError(t, env.GetWorkflowError())
		assert.Equal(t, map[string]bool{"train": true, "report": false}, got)
	})
}

// A forEach of GPU items chooses their clusters in one activity, submits
// them in one activity, is answered in one signal, and gives the GPUs back
// in batch signals: a burst of items costs a few events, not a handful per
// item. A refused item fails alone.
func TestGPUItemsAreSubmittedAndAnsweredTogether(t *testing.T) {
	env, _, _ := newEnv(t)
	fc := &fakeClusters{}
	var mu sync.Mutex
	var submitted []string
	fc.admission = func(req activities.SubmitWorkloadRequest) (activities.SubmitWorkloadResult, error) {
		mu.Lock()
		defer mu.Unlock()
		if *req.Item == 3 {
			return activities.SubmitWorkloadResult{}, temporal.NewNonRetryableApplicationError("GPU admission refuses step train: no", activities.ErrTypeInvalidStep, nil)
		}
		submitted = append(submitted, req.Workload.ID)
		return activities.SubmitWorkloadResult{Queued: true, Workload: req.Workload}, nil
	}
	fc.register(env)
	var released []string
	releaseSignals := 0
	env.OnSignalExternalWorkflow(mock.Anything, activities.AdmissionWorkflowID("gpu-east"), "", activities.SignalAdmissionRequest, mock.Anything).
		Return(func(_, _, _, _ string, arg any) error {
			req := arg.(activities.AdmissionRequest)
			assert.Equal(t, activities.AdmissionBatch, req.Op)
			releaseSignals++
			for _, r := range req.Requests {
				assert.Equal(t, activities.AdmissionRelease, r.Op)
				released = append(released, r.Workload.ID)
			}
			return nil
		})
	env.RegisterDelayedCallback(func() {
		st := status(t, env).Steps[0]
		var u activities.GPUUpdates
		for i, it := range st.Items {
			if i == 3 {
				continue
			}
			assert.Equal(t, runstate.StepWaitingForGPU, it.State, "item %d", i)
			mu.Lock()
			u.Admitted = append(u.Admitted, activities.GPUAdmitted{Workload: submitted[len(u.Admitted)], Nodes: []string{"n1"}})
			mu.Unlock()
		}
		env.SignalWorkflow(activities.SignalGPUUpdates, u)
	}, time.Minute)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, kubeInput(t, `
steps:
  - name: train
    placement: {cluster: gpu-east}
    forEach: {items: [0, 1, 2, 3, 4, 5]}
    continueOn: failed
    container: {image: busybox, command: ["true"], resources: {gpu: 1, gpuType: NVIDIA-L4}}
`))
	require.NoError(t, env.GetWorkflowError())
	st := status(t, env).Steps[0]
	for i, it := range st.Items {
		if i == 3 {
			assert.Equal(t, runstate.StepFailed, it.State)
			assert.Contains(t, it.Error, "GPU admission refuses step train")
			continue
		}
		assert.Equal(t, runstate.StepSucceeded, it.State, "item %d: %s", i, it.Error)
	}
	assert.Equal(t, []int{6}, fc.batches, "one submit activity for the six items")
	assert.Equal(t, 1, fc.selectBatches, "one selection activity for the six items")
	assert.ElementsMatch(t, submitted, released, "every admitted item gave its GPUs back")
	// (The test environment completes each item's activity in a workflow
	// task of its own, so releases travel one per signal here; on a
	// server, those that end together travel together.)
	assert.LessOrEqual(t, releaseSignals, len(released))
}

// A run cancelled while its GPU items wait withdraws them from the queue.
func TestGPUItemsWaitingWhenCancelledLeaveTheQueue(t *testing.T) {
	env, _, _ := newEnv(t)
	fc := &fakeClusters{admission: func(req activities.SubmitWorkloadRequest) (activities.SubmitWorkloadResult, error) {
		return activities.SubmitWorkloadResult{Queued: true, Workload: req.Workload}, nil
	}}
	fc.register(env)
	var released []string
	env.OnSignalExternalWorkflow(mock.Anything, activities.AdmissionWorkflowID("gpu-east"), "", activities.SignalAdmissionRequest, mock.Anything).
		Return(func(_, _, _, _ string, arg any) error {
			for _, r := range arg.(activities.AdmissionRequest).Requests {
				released = append(released, r.Workload.ID)
			}
			return nil
		})
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(runstate.SignalCancel, runstate.CancelRequest{Requester: "ada", Reason: "changed my mind"})
	}, time.Minute)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, kubeInput(t, `
steps:
  - name: train
    placement: {cluster: gpu-east}
    forEach: {items: [0, 1, 2]}
    container: {image: busybox, command: ["true"], resources: {gpu: 1, gpuType: NVIDIA-L4}}
`))
	st := status(t, env)
	assert.Equal(t, runstate.Cancelled, st.State)
	assert.Len(t, released, 3, "each waiting item leaves the queue: %v", released)
	for _, c := range fc.calls {
		assert.False(t, strings.HasPrefix(c, "step "), "a step object was created: %s", c)
	}
}
