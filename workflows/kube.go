package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// kubeTarget is where a step's Kubernetes object goes.
type kubeTarget struct {
	cluster   string
	taskQueue string
	reason    string
}

// sharedRay is a run's shared RayCluster: ensured once, on first use.
type sharedRay struct {
	future workflow.Future // of sharedRayResult
	// grant holds the cluster's GPUs (admitted as one NoPreempt workload)
	// until the run ends; nil when it needs none or admission is off.
	grant *gpuGrant
}

type sharedRayResult struct {
	Target kubeTarget
	Name   string // Kubernetes object name
	Image  string
}

// WithPlacement runs a container step on a Kubernetes cluster chosen by p
// instead of the local runtime (ray and spark steps always run on one).
func WithPlacement(p *pipeline.Placement) StepOption {
	return func(c *stepConfig) { c.placement = p }
}

// onCluster runs a container step with placement p on cluster t, chosen
// by another workflow: the items of a wide step, whose pipeline workflow
// selected the cluster once for all of them and sweeps it when the run
// ends (a batch workflow must not: its sweep by run label would delete
// the other batches' Jobs). Their Jobs delete themselves WideJobTTL after
// they finish, counted once a worker has read their outcome.
func onCluster(p *pipeline.Placement, t kubeTarget) StepOption {
	return func(c *stepConfig) { c.placement, c.target, c.deleteAfter = p, &t, WideJobTTL }
}

// WideJobTTL is how long the Job of a wide step's item stays after it
// finished (activities.KubeStepRequest.DeleteAfter), set on the Job once a
// worker has read its outcome (a Job that finished while none watched
// waits for the retry). Long enough for a retry whose earlier execution
// read the outcome but could not report it; short enough that at 100 items/s a
// cluster holds about 6,000 finished Jobs rather than every item's, and
// the run's end has only those to sweep. A var so tests can shorten it.
var WideJobTTL = time.Minute

// Ray starts a ray step (a KubeRay RayJob) on a registered cluster.
func (r *Run) Ray(ctx workflow.Context, name string, ray pipeline.RayStep, opts ...StepOption) StepFuture {
	return r.kubeStepFuture(ctx, name, pipeline.KindRay, stepWork{ray: &ray}, opts)
}

// Spark starts a spark step (a SparkApplication) on a registered cluster.
func (r *Run) Spark(ctx workflow.Context, name string, s pipeline.SparkStep, opts ...StepOption) StepFuture {
	return r.kubeStepFuture(ctx, name, pipeline.KindSpark, stepWork{spark: &s}, opts)
}

// RayCluster declares a RayCluster shared by this run's ray steps that name
// it in RayStep.Cluster. It is created on first use and deleted when the run
// ends, however it ends.
func (r *Run) RayCluster(c pipeline.SharedRayCluster) {
	r.rayTemplates = append(r.rayTemplates, c)
}

func (r *Run) kubeStepFuture(ctx workflow.Context, name string, kind pipeline.StepKind, w stepWork, opts []StepOption) StepFuture {
	st := r.addStep(name, string(kind))
	if f, ok := r.reusedStep(ctx, st); ok {
		return f
	}
	w.kind = kind
	fut, set := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(gctx workflow.Context) {
		out, err := r.runWork(gctx, st, st.Name, nil, w, opts...)
		if errors.Is(err, errCancelled) {
			err = temporal.NewCanceledError(st.Name)
		}
		set.Set(out, err)
	})
	return StepFuture{f: fut, name: st.Name}
}

// stepWork is one rendered step ready to run.
type stepWork struct {
	kind      pipeline.StepKind
	container *pipeline.Container
	ray       *pipeline.RayStep
	spark     *pipeline.SparkStep
	inference *pipeline.InferenceStep
	pipeline  *pipeline.ChildStep
	gpus      int
	gpuType   string
	// noPreempt admits the work as a workload GPU admission never evicts
	// (a run's shared RayCluster: evicting it would fail every step on it).
	noPreempt bool
}

// artifacts are the artifacts the work declares: a container's, a ray
// or a spark job's (pipeline.Step.DeclaredArtifacts); nil when none.
func (w stepWork) artifacts() *pipeline.Artifacts {
	switch {
	case w.container != nil:
		return w.container.Artifacts
	case w.ray != nil:
		return w.ray.Artifacts
	case w.spark != nil:
		return w.spark.Artifacts
	}
	return nil
}

// runWork runs a rendered step where it belongs: container steps without a
// placement on the local runtime, inference steps through their endpoint's
// workflow, pipeline steps as child runs, everything else on a Kubernetes
// cluster. Work whose step caches (WithCache) is looked up in the step
// cache first (runCached).
func (r *Run) runWork(ctx workflow.Context, st *runstate.StepStatus, stepName string, item *int, w stepWork, opts ...StepOption) (Outputs, error) {
	cfg := newStepConfig(opts)
	if a := w.artifacts(); a != nil {
		msg := r.resolveArtifactRefs(ctx, stepName, item, a)
		if msg == "" {
			msg = r.resolveWideFanIns(ctx, a)
		}
		if msg != "" {
			if ctx.Err() != nil {
				r.endStep(st, runstate.StepCancelled, "", "run cancelled")
				return nil, errCancelled
			}
			r.endStep(st, runstate.StepFailed, msg, "")
			return nil, &StepError{Step: st.Name, Message: msg}
		}
	}
	if cfg.cache != nil && cacheable(w.kind) && r.stepCacheOn() {
		return r.runCached(ctx, st, stepName, item, w, cfg, opts)
	}
	return r.runUncached(ctx, st, stepName, item, w, cfg, opts)
}

// runUncached runs work where it belongs (see runWork).
func (r *Run) runUncached(ctx workflow.Context, st *runstate.StepStatus, stepName string, item *int, w stepWork, cfg stepConfig, opts []StepOption) (Outputs, error) {
	if w.kind == pipeline.KindInference {
		return r.runInference(ctx, st, stepName, item, *w.inference, cfg)
	}
	if w.kind == pipeline.KindPipeline {
		return r.runChild(ctx, st, stepName, item, *w.pipeline, cfg)
	}
	if w.kind == pipeline.KindContainer && cfg.placement == nil {
		return r.runContainer(ctx, st, stepName, item, *w.container, opts...)
	}

	var target kubeTarget
	var rayClusterName, rayClusterImage string
	var err error
	switch {
	case w.ray != nil && w.ray.Cluster != "":
		var sr sharedRayResult
		sr, err = r.ensureSharedRay(ctx, st, w.ray.Cluster)
		target, rayClusterName, rayClusterImage = sr.Target, sr.Name, sr.Image
		if err != nil && st.FinishedAt != nil {
			return nil, err // the cluster's GPU admission has ended this step
		}
	case cfg.target != nil:
		target = *cfg.target
	default:
		target, err = r.selectCluster(ctx, stepName, cfg.placement, w.gpus, w.gpuType)
	}
	if err != nil {
		if ctx.Err() != nil {
			r.endStep(st, runstate.StepCancelled, "", "run cancelled")
			return nil, errCancelled
		}
		msg, _, _ := describeActivityError(err)
		r.endStep(st, runstate.StepFailed, msg, "")
		return nil, &StepError{Step: st.Name, Message: msg}
	}
	if cfg.target == nil {
		st.Message = target.reason
		r.useCluster(target)
	} // else the step that chose it shows why, once, and sweeps it
	kind, _ := activities.KubeKindFor(w.kind)
	// Artifacts: references; the cluster's worker moves the bytes (a
	// container's in its pod, by the launcher; a ray job's through the
	// staging store: activities/kube).
	var inputs []runstate.Artifact
	var outputs []pipeline.ArtifactOutput
	if a := w.artifacts(); a != nil {
		var msg string
		if inputs, msg = r.artifactInputs(stepName, item, a); msg != "" {
			r.endStep(st, runstate.StepFailed, msg, "")
			return nil, &StepError{Step: st.Name, Message: msg}
		}
		st.Inputs, outputs = inputs, a.Outputs
	}
	var pinned []string // the nodes GPU admission chose, if it ran
	attemptFn := func(actx workflow.Context, attempt int) (attemptOutcome, error) {
		req := activities.KubeStepRequest{
			Project: r.status.Project, RunID: r.status.RunID, Step: stepName, Item: item, Attempt: attempt,
			Kind: kind, Timeout: cfg.timeout, DeleteAfter: cfg.deleteAfter, Container: w.container, Inputs: inputs, Outputs: outputs, Metrics: cfg.metrics, Ray: w.ray, Spark: w.spark,
			RayClusterName: rayClusterName, RayClusterImage: rayClusterImage, Nodes: pinned,
		}
		actx = withAttemptSummary(stepActivityOptions(actx, cfg.timeout, target.taskQueue), stepName, item, attempt)
		var res activities.KubeStepResult
		err := workflow.ExecuteActivity(actx, activities.RunKubeStepName, req).Get(actx, &res)
		if err != nil {
			// A failed attempt carries its result as error details.
			var appErr *temporal.ApplicationError
			if errors.As(err, &appErr) && appErr.HasDetails() {
				_ = appErr.Details(&res)
			}
		}
		obj := res.Object
		if obj != "" && res.Namespace != "" {
			obj = res.Object + " -n " + res.Namespace
		}
		return attemptOutcome{ContainerResult: res.ContainerResult, Cluster: target.cluster, Object: obj, Links: res.Links}, err
	}
	for {
		grant, err := r.admitGPU(ctx, st, stepName, item, w, target)
		if err != nil {
			return nil, err
		}
		if grant == nil {
			return r.runAttempts(ctx, st, cfg, attemptFn)
		}
		pinned = grant.nodes
		cfg.requeued = func() bool { return grant.preempted != "" && ctx.Err() == nil }
		out, err := r.runAttempts(grant.ctx, st, cfg, attemptFn)
		grant.release(ctx)
		if err == nil || grant.preempted == "" || ctx.Err() != nil {
			return out, err // finished (a late preemption changes nothing), or the run was cancelled
		}
		// Preempted: the attempt was cancelled (its objects deleted); the
		// step queues again, and the lost attempt does not count against
		// its retries.
		if n := len(st.Attempts); n > 0 {
			st.Attempts[n-1].Error = grant.preempted
		}
		st.FinishedAt, st.Error = nil, ""
		st.Message = grant.preempted + "; queued again"
		cfg.firstAttempt = len(st.Attempts) + 1
		cfg.preempted++
		r.touch()
	}
}

// controlActivity is the context of a short bookkeeping activity on the
// run's control queue (cluster selection, GPU submission): retried up to 10
// times, except for the error type that says retrying cannot help.
func (r *Run) controlActivity(ctx workflow.Context, nonRetryable string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           r.controlQueue(""),
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			MaximumAttempts:        10,
			NonRetryableErrorTypes: []string{nonRetryable},
		},
	})
}

// selectCluster asks the registry (an activity on the run's control queue,
// batched with the other selections of the same workflow task) for a
// cluster; the answer is recorded in history, so replay is stable.
func (r *Run) selectCluster(ctx workflow.Context, step string, p *pipeline.Placement, gpus int, gpuType string) (kubeTarget, error) {
	req := activities.SelectClusterRequest{Project: r.status.Project, Step: step, Placement: p, GPUs: gpus, GPUType: gpuType}
	var res activities.SelectClusterResult
	var err error
	if r.batchedControl(ctx) {
		res, err = r.selectBatched(ctx, req)
	} else {
		err = workflow.ExecuteActivity(r.controlActivity(ctx, activities.ErrTypeNoCluster), activities.SelectClusterName, req).Get(ctx, &res)
	}
	if err != nil {
		return kubeTarget{}, err
	}
	return kubeTarget{cluster: res.Cluster, taskQueue: res.TaskQueue, reason: res.Reason}, nil
}

// ensureSharedRay creates the named shared RayCluster once per run; every
// ray step naming it waits for the same future. When the cluster's pods
// need GPUs, it is first admitted as one workload (shown on st, the first
// step that uses it), pinned to the admitted nodes and never preempted;
// its GPUs are given back when the run ends.
func (r *Run) ensureSharedRay(ctx workflow.Context, st *runstate.StepStatus, name string) (sharedRayResult, error) {
	if r.sharedRay == nil {
		r.sharedRay = map[string]*sharedRay{}
	}
	if s, ok := r.sharedRay[name]; ok {
		var res sharedRayResult
		err := s.future.Get(ctx, &res)
		return res, err
	}
	var tmpl *pipeline.SharedRayCluster
	for i := range r.rayTemplates {
		if r.rayTemplates[i].Name == name {
			tmpl = &r.rayTemplates[i]
		}
	}
	fut, set := workflow.NewFuture(ctx)
	r.sharedRay[name] = &sharedRay{future: fut}
	r.sharedOrder = append(r.sharedOrder, name)
	if tmpl == nil {
		err := temporal.NewNonRetryableApplicationError(fmt.Sprintf("no shared RayCluster named %q in this run", name), activities.ErrTypeInvalidStep, nil)
		set.SetError(err)
		return sharedRayResult{}, err
	}
	gpus, gpuType := tmpl.RayClusterTemplate.GPURequest()
	target, err := r.selectCluster(ctx, "raycluster/"+name, tmpl.Placement, gpus, gpuType)
	if err != nil {
		set.SetError(err)
		return sharedRayResult{}, err
	}
	r.useCluster(target)
	var nodes []string
	if workflow.GetVersion(ctx, versionSharedRayAdmission, workflow.DefaultVersion, 1) == 1 {
		st.Message = target.reason
		w := stepWork{kind: pipeline.KindRay, ray: &pipeline.RayStep{RayClusterTemplate: tmpl.RayClusterTemplate}, noPreempt: true}
		grant, err := r.admitGPU(ctx, st, "raycluster-"+name, nil, w, target)
		if err != nil {
			set.SetError(err)
			return sharedRayResult{}, err
		}
		if grant != nil {
			r.sharedRay[name].grant = grant
			nodes = grant.nodes
		}
	}
	ectx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           target.taskQueue,
		StartToCloseTimeout: 30 * time.Minute, // a cold cluster pulls big images
		HeartbeatTimeout:    30 * time.Second,
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			MaximumAttempts:        10,
			NonRetryableErrorTypes: []string{activities.ErrTypeInvalidStep},
		},
	})
	var res activities.EnsureRayClusterResult
	err = workflow.ExecuteActivity(ectx, activities.EnsureRayClusterName, activities.EnsureRayClusterRequest{
		Project: r.status.Project, RunID: r.status.RunID, Cluster: *tmpl, Nodes: nodes,
	}).Get(ectx, &res)
	out := sharedRayResult{Target: target, Name: res.Name, Image: tmpl.Image}
	set.Set(out, err)
	return out, err
}

// releaseSharedRay gives back the GPUs of the run's shared RayClusters,
// once their objects are deleted, in the order they were first used.
func (r *Run) releaseSharedRay(ctx workflow.Context) {
	for _, n := range r.sharedOrder {
		if s := r.sharedRay[n]; s.grant != nil {
			s.grant.release(ctx)
			s.grant = nil
		}
	}
}

// useCluster remembers a cluster the run created objects on, so the end of
// the run sweeps it.
func (r *Run) useCluster(t kubeTarget) {
	for _, c := range r.kubeClusters {
		if c.cluster == t.cluster {
			return
		}
	}
	r.kubeClusters = append(r.kubeClusters, t)
}

// cleanupKube deletes every object the run created on every cluster it used
// (foreground propagation), in parallel, from a disconnected context so it
// runs however the run ended. Failures are recorded, not fatal: the objects
// carry the run's labels for a manual sweep.
// CleanupTimeout bounds the cleanup of one cluster's objects when a run
// ends, queueing included (a var so tests can shorten it).
var CleanupTimeout = 5 * time.Minute

func (r *Run) cleanupKube(ctx workflow.Context) {
	if len(r.kubeClusters) == 0 {
		return
	}
	defer r.releaseSharedRay(ctx)
	futures := make([]workflow.Future, len(r.kubeClusters))
	for i, t := range r.kubeClusters {
		cctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue:           r.controlQueue(t.taskQueue),
			StartToCloseTimeout: 2 * time.Minute,
			// Bounded overall: a cluster whose worker is gone never picks
			// the task up, and the run must still end.
			ScheduleToCloseTimeout: CleanupTimeout,
			RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 20, MaximumInterval: 30 * time.Second},
		})
		futures[i] = workflow.ExecuteActivity(cctx, activities.CleanupRunObjectsName, activities.CleanupRunObjectsRequest{
			Project: r.status.Project, RunID: r.status.RunID,
		})
	}
	for i, f := range futures {
		if err := f.Get(ctx, nil); err != nil {
			c := r.kubeClusters[i].cluster
			r.status.Warnings = append(r.status.Warnings, fmt.Sprintf(
				"cleanup on cluster %s did not finish (%v): objects of this run may be left there; delete them with `kubectl delete jobs,rayjobs,rayclusters,sparkapplications -A -l atelier.dev/run=%s`",
				c, err, r.status.RunID))
		}
	}
}
