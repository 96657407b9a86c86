package workflows

import (
	"fmt"
	"strconv"
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/runstate"
)

// versionGPUAdmission guards GPU admission of Kubernetes steps
// (workflow.GetVersion change ID; never reuse it). Runs recorded before it
// create their GPU steps' objects at once.
const versionGPUAdmission = "atelier.gpu-admission"

// versionSharedRayAdmission guards GPU admission of a run's shared
// RayClusters (workflow.GetVersion change ID; never reuse it). Runs
// recorded before it create them at once.
const versionSharedRayAdmission = "atelier.gpu-admission-shared-raycluster"

// gpuWaiter is a step waiting for its admission.
type gpuWaiter struct {
	st   *runstate.StepStatus
	set  workflow.Settable
	done bool
}

// gpuGrant is an admitted step's hold on its GPUs. Its ctx is cancelled
// when the admission preempts the step.
type gpuGrant struct {
	ctx       workflow.Context
	cancel    workflow.CancelFunc
	r         *Run
	id        string   // the workload
	cluster   string   // whose admission workflow admitted it
	nodes     []string // where the GPU pods must run
	preempted string   // why, once preempted
	batched   bool     // released in a batch (versionBatchedControl)
}

// release gives the GPUs back. ctx must belong to the calling coroutine
// (a Temporal context is bound to the coroutine that made it).
func (g *gpuGrant) release(ctx workflow.Context) {
	delete(g.r.gpuGrants, g.id)
	g.r.releaseGPU(ctx, g.batched, g.cluster, g.id)
}

// releaseGPU gives a workload's GPUs back, in a batch or on its own.
func (r *Run) releaseGPU(ctx workflow.Context, batched bool, cluster, id string) {
	if !batched {
		releaseWorkload(ctx, cluster, id)
		return
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	r.releaseBatched(dctx, cluster, id)
}

// releaseWorkload tells the cluster's admission workflow that workload id
// ended or stopped waiting. Best effort: a lost release is found by the
// admission workflow when it next signals this (ended) run.
func releaseWorkload(ctx workflow.Context, cluster, id string) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	_ = workflow.SignalExternalWorkflow(dctx, activities.AdmissionWorkflowID(cluster), "", activities.SignalAdmissionRequest,
		activities.AdmissionRequest{Op: activities.AdmissionRelease, Workload: gpu.Workload{ID: id}}).Get(dctx, nil)
}

// admitGPU makes a step that needs GPUs wait for its cluster's admission
// (state WAITING_FOR_GPU, no Kubernetes object yet) and returns its grant:
// the context its attempts run under (cancelled if the step is preempted)
// and the function that gives the GPUs back. A step without GPUs, and
// every step while the installation has no GPU policy, passes at once
// (nil grant). On cancellation while waiting, the workload is withdrawn and
// errCancelled returned; on a submission the admission refuses (e.g. a
// priority outside the project's range), the step fails.
func (r *Run) admitGPU(ctx workflow.Context, st *runstate.StepStatus, stepName string, item *int, w stepWork, target kubeTarget) (*gpuGrant, error) {
	gang := gangOf(w)
	if len(gang) == 0 {
		return nil, nil
	}
	if workflow.GetVersion(ctx, versionGPUAdmission, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil, nil
	}
	batched := r.batchedControl(ctx)
	id := workloadID(r.status.RunID, stepName, item)
	r.startGPUSignals()
	fut, set := workflow.NewFuture(ctx)
	r.gpuWaiters[id] = &gpuWaiter{st: st, set: set}
	defer delete(r.gpuWaiters, id)

	now := workflow.Now(ctx)
	placed := st.Message // why this cluster
	st.State, st.Message = runstate.StepWaitingForGPU, "waiting for GPU admission on cluster "+target.cluster
	r.touch()
	req := activities.SubmitWorkloadRequest{
		Cluster: target.cluster, Run: r.status.RunID, Step: stepName, Item: item,
		Workload: gpu.Workload{ID: id, Project: r.status.Project, Priority: r.gpuPrio, Submitted: now, PodSets: gang, NoPreempt: w.noPreempt},
		Kind:     string(w.kind),
	}
	var res activities.SubmitWorkloadResult
	var err error
	if batched {
		res, err = r.submitBatched(ctx, req)
	} else {
		err = workflow.ExecuteActivity(r.controlActivity(ctx, activities.ErrTypeInvalidStep), activities.SubmitWorkloadName, req).Get(ctx, &res)
	}
	if err != nil {
		if ctx.Err() != nil {
			r.endStep(st, runstate.StepCancelled, "", "run cancelled while waiting for GPU admission")
			return nil, errCancelled
		}
		msg, _, _ := describeActivityError(err)
		r.endStep(st, runstate.StepFailed, msg, "")
		return nil, &StepError{Step: st.Name, Message: msg}
	}
	if !res.Queued {
		st.State, st.Message = runstate.StepPending, placed
		if res.KueueQueue != "" {
			st.Message = strings.TrimPrefix(placed+"; ", "; ") + "GPUs admitted by Kueue (LocalQueue " + res.KueueQueue + ")"
		}
		r.touch()
		return nil, nil
	}

	var adm activities.GPUAdmitted
	if batched && !awaitFuture(ctx, fut) {
		// Cancelled while waiting: the workload leaves the queue.
		r.releaseGPU(ctx, true, target.cluster, id)
		r.endStep(st, runstate.StepCancelled, "", "run cancelled while waiting for GPU admission")
		return nil, errCancelled
	}
	if err := fut.Get(ctx, &adm); err != nil || ctx.Err() != nil {
		r.releaseGPU(ctx, batched, target.cluster, id)
		r.endStep(st, runstate.StepCancelled, "", "run cancelled while waiting for GPU admission")
		return nil, errCancelled
	}
	st.State = runstate.StepPending
	st.Message = fmt.Sprintf("GPUs admitted on cluster %s (nodes %s)", target.cluster, strings.Join(adm.Nodes, ", "))
	if adm.Borrowed {
		st.Message += ", borrowing quota from the cohort"
	}
	r.touch()
	g := &gpuGrant{r: r, id: id, cluster: target.cluster, nodes: adm.Nodes, batched: batched}
	g.ctx, g.cancel = workflow.WithCancel(ctx)
	r.gpuGrants[id] = g
	return g, nil
}

// startGPUSignals starts, once per run, the coroutine that hands admission
// answers to the waiting steps.
func (r *Run) startGPUSignals() {
	if r.gpuWaiters != nil {
		return
	}
	r.gpuWaiters = map[string]*gpuWaiter{}
	r.gpuGrants = map[string]*gpuGrant{}
	admitted := workflow.GetSignalChannel(r.root, activities.SignalGPUAdmitted)
	waiting := workflow.GetSignalChannel(r.root, activities.SignalGPUWaiting)
	preempt := workflow.GetSignalChannel(r.root, activities.SignalGPUPreempt)
	updates := workflow.GetSignalChannel(r.root, activities.SignalGPUUpdates)
	workflow.Go(r.root, func(gctx workflow.Context) {
		for {
			sel := workflow.NewSelector(gctx)
			sel.AddReceive(admitted, func(c workflow.ReceiveChannel, _ bool) {
				var a activities.GPUAdmitted
				c.Receive(gctx, &a)
				r.gpuAdmitted(a)
			})
			sel.AddReceive(waiting, func(c workflow.ReceiveChannel, _ bool) {
				var wt activities.GPUWaiting
				c.Receive(gctx, &wt)
				r.gpuWaiting(wt)
			})
			sel.AddReceive(preempt, func(c workflow.ReceiveChannel, _ bool) {
				var p activities.GPUPreempt
				c.Receive(gctx, &p)
				r.gpuPreempt(p)
			})
			sel.AddReceive(updates, func(c workflow.ReceiveChannel, _ bool) {
				var u activities.GPUUpdates
				c.Receive(gctx, &u)
				for _, a := range u.Admitted {
					r.gpuAdmitted(a)
				}
				for _, wt := range u.Waiting {
					r.gpuWaiting(wt)
				}
				for _, p := range u.Preempt {
					r.gpuPreempt(p)
				}
			})
			sel.AddReceive(gctx.Done(), func(workflow.ReceiveChannel, bool) {})
			sel.Select(gctx)
			if gctx.Err() != nil {
				return
			}
		}
	})
}

// gpuAdmitted wakes the step waiting for workload a.
func (r *Run) gpuAdmitted(a activities.GPUAdmitted) {
	if w := r.gpuWaiters[a.Workload]; w != nil && !w.done {
		w.done = true
		w.set.Set(a, nil)
	}
}

// gpuWaiting shows why a waiting step's workload still waits.
func (r *Run) gpuWaiting(wt activities.GPUWaiting) {
	if w := r.gpuWaiters[wt.Workload]; w != nil && !w.done {
		w.st.Message = "waiting for GPUs: " + wt.Message
		r.touch()
	}
}

// gpuPreempt cancels the attempt of an admitted step the admission
// preempts.
func (r *Run) gpuPreempt(p activities.GPUPreempt) {
	if g := r.gpuGrants[p.Workload]; g != nil && g.preempted == "" {
		g.preempted = p.Describe()
		g.cancel()
	}
}

// workloadID names a step's (or forEach item's) GPU workload: unique in the
// cluster's queue, readable in it.
func workloadID(run, step string, item *int) string {
	id := run + "/" + step
	if item != nil {
		id += "/" + strconv.Itoa(*item)
	}
	return id
}

// gangOf is the GPU gang of a step: every pod that asks for GPUs, by pod
// set. A ray step on a run's shared RayCluster holds none itself: the
// cluster does, admitted once for the run (ensureSharedRay).
func gangOf(w stepWork) []gpu.PodSet {
	var out []gpu.PodSet
	add := func(name string, count int, per int, typ string) {
		if count > 0 && per > 0 {
			out = append(out, gpu.PodSet{Name: name, Count: count, Per: per, Resource: gpu.Resource(typ)})
		}
	}
	switch {
	case w.container != nil && w.container.Resources != nil:
		add("step", 1, w.container.Resources.GPU, w.container.Resources.GPUType)
	case w.ray != nil && w.ray.Cluster == "":
		t := w.ray.RayClusterTemplate
		add("head", 1, t.Head.GPU, t.Head.GPUType)
		for _, g := range t.Workers {
			add(g.Name, int(max(g.Replicas, g.MinReplicas)), g.GPU, g.GPUType)
		}
	case w.spark != nil:
		add("driver", 1, w.spark.Driver.GPU, w.spark.Driver.GPUType)
		add("executor", int(w.spark.Executor.Instances), w.spark.Executor.GPU, w.spark.Executor.GPUType)
	}
	return out
}
