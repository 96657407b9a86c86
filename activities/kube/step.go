package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/internal/platform/launch"
	"github.com/atelier-ml/atelier/runstate"
)

// RunKubeStep runs one attempt of a step as a Kubernetes object and waits,
// by watch, until it finishes.
//
// The object's name is deterministic, so a Temporal retry of the activity
// (the worker was killed mid-step) adopts the object the earlier execution
// created instead of making a second one; the heartbeat details
// {namespace, name, uid} let it resume even when the object is no longer
// findable by name alone.
//
// Step outcomes are non-retryable application errors carrying the
// KubeStepResult as details: StepFailed ("<Kind> <name> failed: <reason>:
// <message>"), StepTimeout (req.Timeout elapsed; the object is deleted),
// InvalidStep (the request cannot run, or the API server rejected the
// object: its message names the field), BadOutputs. Problems talking to the
// cluster are plain, retryable errors. On cancellation the object is
// deleted (foreground propagation) and ctx.Err() returned. When the worker
// shuts down, the object is left running and a retryable error returned:
// the retry, on another worker, resumes waiting.
//
// Called outside a Temporal activity (benchmarks, tools) it works the same,
// without heartbeats.
func (b *Backend) RunKubeStep(ctx context.Context, req activities.KubeStepRequest) (activities.KubeStepResult, error) {
	kind := b.kinds[req.Kind]
	if kind == nil {
		if needs, ok := b.missing[req.Kind]; ok {
			return activities.KubeStepResult{}, framework.Invalid("cluster %s cannot run %s steps: the worker has no client for %s", b.cluster, req.Kind, needs)
		}
		return activities.KubeStepResult{}, framework.Invalid("unknown Kubernetes step kind %q", req.Kind)
	}
	if err := validateStep(req); err != nil {
		return activities.KubeStepResult{}, framework.Invalid("%v", err)
	}
	ns, err := b.namespace(req.Project)
	if err != nil {
		return activities.KubeStepResult{}, err
	}
	id := framework.Identity{Project: req.Project, Run: req.RunID, Step: req.Step, Item: req.Item, Attempt: req.Attempt}
	step := framework.Step{
		Request: req,
		Meta: metav1.ObjectMeta{
			Name:        framework.ObjectName(req.RunID, req.Step, req.Item, req.Attempt, kind.MaxNameLength()),
			Namespace:   ns,
			Labels:      id.Labels(),
			Annotations: id.Annotations(),
		},
		Env:         framework.StepEnv(req),
		PodDefaults: b.podPolicy.Defaults,
	}
	launcher, launchGrant, err := b.launch(ctx, req)
	if err != nil {
		return activities.KubeStepResult{}, err
	}
	staged, stagedEnv, err := b.stage(ctx, req)
	if err != nil {
		return activities.KubeStepResult{}, err
	}
	if staged != nil {
		step.Env = withStagingEnv(step.Env, stagedEnv)
	}
	step.Launch = launcher
	secret, err := b.stepSecret(ctx, req, step.Meta, launchGrant)
	if err != nil {
		return activities.KubeStepResult{}, err
	}
	if secret != nil {
		step.SecretName = secret.Name
	}
	desired, err := kind.Build(step)
	if err != nil {
		return activities.KubeStepResult{}, err
	}
	if b.mutate != nil {
		b.mutate(desired)
	}
	if err := b.podPolicy.CheckPods(kind, desired); err != nil {
		return activities.KubeStepResult{}, err
	}
	inKueue := framework.QueueInKueue(kind, desired, b.kueueQueue)
	item := -1
	if req.Item != nil {
		item = *req.Item
	}
	r := &stepRun{
		b: b, kind: kind, req: req, inKueue: inKueue, ns: ns, name: step.Meta.Name, key: ns + "/" + step.Meta.Name, secret: secret,
		logger: b.logger.With(zap.String("run", req.RunID), zap.String("step", req.Step), zap.Int("item", item),
			zap.Int("attempt", req.Attempt), zap.String("object", kind.Kind()+" "+ns+"/"+step.Meta.Name)),
	}
	defer r.dropSecret(ctx)
	res, err := r.run(ctx, desired)
	if staged != nil {
		res, err = r.finishStaged(ctx, staged, res, err)
	}
	return r.redactOutputs(res), err
}

func validateStep(req activities.KubeStepRequest) error {
	switch {
	case req.Project == "":
		return errors.New("request has no project")
	case req.RunID == "":
		return errors.New("request has no run ID")
	case req.Step == "":
		return errors.New("request has no step name")
	case req.Attempt < 1:
		return fmt.Errorf("attempt must be 1 or more, got %d", req.Attempt)
	case req.Item != nil && *req.Item < 0:
		return fmt.Errorf("item index must not be negative, got %d", *req.Item)
	case req.Timeout < 0:
		return fmt.Errorf("timeout must not be negative, got %s", req.Timeout)
	case req.DeleteAfter < 0:
		return fmt.Errorf("deleteAfter must not be negative, got %s", req.DeleteAfter)
	}
	n := 0
	for _, set := range []bool{req.Container != nil, req.Ray != nil, req.Spark != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("exactly one of container, ray, spark must be set for a %s step, got %d", req.Kind, n)
	}
	return nil
}

// stepRun is one execution of RunKubeStep.
type stepRun struct {
	b              *Backend
	kind           framework.Kind
	req            activities.KubeStepRequest
	ns, name, key  string
	logger         *zap.Logger
	uid            types.UID
	creation       time.Time
	objects, pods  *framework.Watch
	objSub, podSub *framework.Waiter
	lastWaiting    string // the waiting reason last reported to the run
	inKueue        bool   // created suspended in a Kueue LocalQueue
	kueueWhy       string // Kueue's reason, last read
	kueueAt        time.Time
	secret         *corev1.Secret // the attempt's secrets; nil when it has none
	// leftRunning: this execution leaves the object running for a retry
	// to adopt (worker stopping, backend closed, execution superseded), so
	// the attempt's Secret stays: a pod not started yet still needs it.
	leftRunning bool
	// follower stores the output container's log while it runs (nil
	// until it starts, or when it is not followed); stopFollowing ends it.
	follower      *follower
	stopFollowing context.CancelFunc
}

func (r *stepRun) result() activities.KubeStepResult {
	return activities.KubeStepResult{
		ContainerResult: activities.ContainerResult{ExitCode: -1, StartedAt: r.creation},
		Namespace:       r.ns,
		Object:          objectRef(r.kind, r.name),
	}
}

func (r *stepRun) run(ctx context.Context, desired framework.Object) (activities.KubeStepResult, error) {
	b := r.b
	obj, adopted, err := r.acquire(ctx, desired)
	if err != nil {
		return r.result(), err
	}
	r.uid = obj.GetUID()
	if err := r.ownSecret(ctx, obj); err != nil {
		return r.result(), err
	}
	r.creation = obj.GetCreationTimestamp().Time
	if r.creation.IsZero() {
		r.creation = b.clock.Now()
	}
	if adopted {
		r.logger.Info("adopted existing object", zap.String("uid", string(r.uid)))
	} else {
		r.logger.Info("created object", zap.String("uid", string(r.uid)))
	}

	// Subscribe before the informers (re)start and before reading their
	// caches, so that no change can fall between a read and a wait.
	r.objects = b.informers.For(r.kind)
	r.objSub = r.objects.Subscribe(r.key)
	defer r.objSub.Close()
	var podC <-chan struct{}
	if r.kind.WatchPods() {
		r.pods = b.informers.Pods(b.clients.Kube)
		r.podSub = r.pods.Subscribe(r.key)
		defer r.podSub.Close()
		podC = r.podSub.C
	}
	hb := b.startHeartbeat(ctx, Heartbeat{Namespace: r.ns, Name: r.name, UID: string(r.uid)})
	defer hb.Stop()
	defer func() {
		if r.stopFollowing != nil {
			r.stopFollowing()
		}
	}()

	var deadline <-chan time.Time
	if r.req.Timeout > 0 {
		// From the object's creation, not this execution's start: a retry
		// after a worker crash must not grant the attempt more time.
		left := r.req.Timeout
		if created := obj.GetCreationTimestamp().Time; adopted && !created.IsZero() {
			left -= b.clock.Since(created)
		}
		t := b.clock.NewTimer(max(left, 0))
		defer t.Stop()
		deadline = t.C()
	}
	stop := workerStop(ctx)

	if err := r.objects.Start(ctx); err != nil {
		return r.interrupted(ctx, stop, err)
	}
	if r.pods != nil {
		if err := r.pods.Start(ctx); err != nil {
			return r.interrupted(ctx, stop, err)
		}
	}

	seen := false
	last := framework.Phase(-1)
	var stuckSince time.Time
	var stuckTimer, kueueTimer clock.Timer
	defer func() {
		for _, t := range []clock.Timer{stuckTimer, kueueTimer} {
			if t != nil {
				t.Stop()
			}
		}
	}()
	for {
		cur := obj
		if o, ok := r.objects.Get(r.key); ok && o.GetUID() == r.uid {
			cur, seen = o, true
		} else if seen || r.objSub.Deleted(r.uid) {
			// Gone from the cache (or replaced by another object of that
			// name) after being in it, or a delete event seen. Before the
			// cache first shows it, the object from the create stands in.
			res := r.result()
			res.FinishedAt = b.clock.Now()
			return res, framework.StepFailed(fmt.Sprintf("%s %s was deleted before it finished", r.kind.Kind(), r.name), res)
		}
		pods := r.currentPods()
		p := r.kind.Progress(cur, pods)
		if r.pods != nil {
			r.maybeFollow(ctx, pods, r.kind.OutputPods(cur).Container)
		}
		if p.Phase != last {
			r.logger.Info("step object", zap.Stringer("phase", p.Phase), zap.String("reason", p.Reason))
			last = p.Phase
		}
		switch {
		case p.Phase == framework.Succeeded:
			res, err := r.succeeded(ctx, cur, p)
			r.expire(ctx, cur, err)
			return res, err
		case p.Phase == framework.Failed:
			res, err := r.failed(ctx, cur, p)
			r.expire(ctx, cur, err)
			return res, err
		case cur.GetDeletionTimestamp() != nil:
			res := r.result()
			res.FinishedAt = b.clock.Now()
			return res, framework.StepFailed(fmt.Sprintf("%s %s is being deleted (by someone else) before it finished", r.kind.Kind(), r.name), res)
		}

		waiting := waitingMessage(p.Waiting)
		var kueueC <-chan time.Time
		if r.inKueue && r.kind.(framework.Suspendable).Suspended(cur) {
			waiting = r.kueueReason(ctx)
			if kueueTimer != nil {
				kueueTimer.Stop()
			}
			kueueTimer = b.clock.NewTimer(b.kueuePoll)
			kueueC = kueueTimer.C()
		}
		r.reportWaiting(ctx, waiting)

		var stuckC <-chan time.Time
		if p.Stuck == nil {
			stuckSince = time.Time{}
		} else {
			if stuckSince.IsZero() {
				stuckSince = b.clock.Now()
				r.logger.Warn("pod cannot start", zap.String("reason", p.Stuck.Reason), zap.String("message", p.Stuck.Message))
			}
			left := b.pullGrace - b.clock.Since(stuckSince)
			if left <= 0 || p.Stuck.Permanent {
				return r.stuck(p)
			}
			if stuckTimer != nil {
				stuckTimer.Stop()
			}
			stuckTimer = b.clock.NewTimer(left)
			stuckC = stuckTimer.C()
		}

		select {
		case <-r.objSub.C:
		case <-podC:
		case <-stuckC:
		case <-kueueC:
		case <-deadline:
			return r.timedOut()
		case <-stop:
			return r.result(), r.stopping()
		case <-b.informers.Done():
			r.leftRunning = true
			return r.result(), errBackendClosed
		case <-ctx.Done():
			return r.interrupted(ctx, stop, ctx.Err())
		}
	}
}

// kueueReason is why Kueue has not admitted the suspended object, read
// from its Workload at most every kueuePoll (a Workload's changes do not
// wake the loop: Atelier does not watch Kueue's objects, and a waiting
// reason a couple of seconds old is fine). Kueue's status writes nothing
// on Atelier's objects until it admits them.
func (r *stepRun) kueueReason(ctx context.Context) string {
	b := r.b
	if r.kueueWhy != "" && b.clock.Since(r.kueueAt) < b.kueuePoll {
		return r.kueueWhy
	}
	r.kueueAt = b.clock.Now()
	if b.clients.Dynamic == nil {
		r.kueueWhy = "Kueue: waiting in LocalQueue " + b.kueueQueue + " (the worker cannot read Kueue's Workloads)"
		return r.kueueWhy
	}
	why, err := framework.KueueWaiting(ctx, b.clients.Dynamic, r.ns, r.uid, b.kueueQueue)
	if err != nil {
		r.logger.Warn("cannot read the Kueue workload", zap.Error(err))
		why = fmt.Sprintf("Kueue: waiting in LocalQueue %s (cannot read its Workload: is Kueue installed? %v)", b.kueueQueue, err)
	}
	r.kueueWhy = why
	return why
}

// errBackendClosed is retryable: the object keeps running, and a retry on
// a live backend resumes waiting for it.
var errBackendClosed = errors.New("the Kubernetes backend was closed while the step was running; a retry resumes waiting")

// acquire creates the object or adopts this attempt's existing one.
func (r *stepRun) acquire(ctx context.Context, desired framework.Object) (framework.Object, bool, error) {
	b := r.b
	if err := b.ensureNamespace(ctx, r.ns, r.req.Project); err != nil {
		return nil, false, err
	}
	if hb, ok := previousHeartbeat(ctx, r.logger); ok {
		// An earlier execution of this very attempt created the object
		// and heartbeated it: resume it. If it is gone, it was deleted
		// while no worker watched; re-creating it would run the step a
		// second time under the same attempt number, so fail instead and
		// let the pipeline make a new, visible attempt.
		obj, err := r.kind.Get(ctx, hb.Namespace, hb.Name)
		if apierrors.IsNotFound(err) {
			return nil, false, framework.StepFailed(fmt.Sprintf(
				"%s %s/%s, created by an earlier execution of this attempt, no longer exists: it was deleted while no worker was watching",
				r.kind.Kind(), hb.Namespace, hb.Name), r.result())
		}
		if err != nil {
			return nil, false, framework.WrapAPI(err, "get %s %s/%s", r.kind.Kind(), hb.Namespace, hb.Name)
		}
		if err := framework.CheckAdoptable(r.kind, obj, desired.GetLabels()); err != nil {
			return nil, false, err
		}
		if string(obj.GetUID()) != hb.UID {
			r.logger.Warn("object was re-created since the last heartbeat; adopting it by its labels",
				zap.String("heartbeatUID", hb.UID), zap.String("uid", string(obj.GetUID())))
		}
		r.ns, r.name, r.key = hb.Namespace, hb.Name, hb.Namespace+"/"+hb.Name
		// Its Secret again, if an earlier worker dropped it: a pod that has
		// not started yet needs it (a running one read it at its start).
		if err := r.ensureSecret(ctx); err != nil {
			return nil, false, err
		}
		return obj, true, nil
	}
	// The Secret first: the pod must not start without it.
	if err := r.ensureSecret(ctx); err != nil {
		return nil, false, err
	}
	obj, adopted, err := framework.CreateOrAdopt(ctx, r.kind, desired)
	if errors.Is(err, framework.ErrMissingNamespace) {
		// Deleted since it was cached: make it again, once.
		b.namespaces.Delete(r.ns)
		if err := b.ensureNamespace(ctx, r.ns, r.req.Project); err != nil {
			return nil, false, err
		}
		obj, adopted, err = framework.CreateOrAdopt(ctx, r.kind, desired)
	}
	return obj, adopted, err
}

// currentPods returns the step's pods from the pod informer, skipping pods
// of an earlier object of the same name.
func (r *stepRun) currentPods() []*corev1.Pod {
	if r.pods == nil {
		return nil
	}
	var out []*corev1.Pod
	for _, o := range r.pods.List(r.key) {
		p, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		if c := metav1.GetControllerOf(p); c != nil && c.UID != r.uid {
			continue
		}
		out = append(out, p)
	}
	return out
}

func (r *stepRun) finishedAt(p framework.Progress) time.Time {
	if !p.FinishedAt.IsZero() {
		return p.FinishedAt
	}
	return r.b.clock.Now()
}

func (r *stepRun) succeeded(ctx context.Context, obj framework.Object, p framework.Progress) (activities.KubeStepResult, error) {
	res := r.result()
	res.ExitCode = 0
	res.FinishedAt = r.finishedAt(p)
	res.Links = p.Links
	term, ok, err := r.b.outputTermination(ctx, r.ns, obj, r.kind.OutputPods(obj), r.b.outputWait)
	if err != nil {
		// Retryable: a retry adopts the finished object and reads again.
		return res, err
	}
	if ok {
		res.ExitCode = int(term.ExitCode)
		r.copyLog(ctx, term, r.kind.OutputPods(obj).Container)
		if launches(r.req) {
			res, err := r.launchedOutputs(ctx, term.Message, term.Pod, res)
			if err == nil {
				r.logger.Info("step succeeded", zap.Int("outputs", len(res.Outputs)), zap.Int("artifacts", len(res.Artifacts)))
			}
			return res, err
		}
		metrics, msg := framework.SplitMetrics(term.Message)
		outputs, err := framework.ParseOutputs(msg)
		if err != nil {
			return res, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("%s (pod %s)", err, term.Pod), activities.ErrTypeBadOutputs, nil, res)
		}
		res.Outputs = outputs
		if metrics != nil {
			m, err := runstate.ParseMetrics(metrics)
			if err != nil {
				return res, temporal.NewNonRetryableApplicationError(
					fmt.Sprintf("%s (pod %s)", r.redactor().String(err.Error()), term.Pod), activities.ErrTypeBadOutputs, nil, res)
			}
			res.Metrics = r.redactor().Metrics(m)
		}
	} else if launches(r.req) {
		// Without its launcher's result a step's artifacts and metrics
		// are unknown: succeeding would hand the next steps nothing.
		return res, framework.StepFailed(fmt.Sprintf("%s %s succeeded but its pod is gone, and with it the launcher's report of the stored artifacts and metrics", r.kind.Kind(), r.name), res)
	}
	r.logger.Info("step succeeded", zap.Int("outputs", len(res.Outputs)))
	return res, nil
}

func (r *stepRun) failed(ctx context.Context, obj framework.Object, p framework.Progress) (activities.KubeStepResult, error) {
	res := r.result()
	res.FinishedAt = r.finishedAt(p)
	res.Links = p.Links
	// Best effort, no waiting: the exit code helps, but the failure
	// stands without it. The operator's message is redacted: KubeRay's
	// quotes the last lines the Ray job printed.
	msg := r.redactor().String(failureMessage(r.kind.Kind(), r.name, p.Reason, p.Message))
	if term, ok, err := r.b.outputTermination(ctx, r.ns, obj, r.kind.OutputPods(obj), 0); err == nil && ok {
		res.ExitCode = int(term.ExitCode)
		if term.ExitCode != 0 {
			msg += "; " + term.Describe()
		}
		r.copyLog(ctx, term, r.kind.OutputPods(obj).Container)
		if lr, err := launch.ParseResult(term.Message); launches(r.req) && err == nil && lr.Error != "" && !p.TimedOut {
			r.logger.Info("step failed in its launcher", zap.String("error", lr.Error))
			return res, r.launcherFailure(lr, res)
		}
	}
	r.logger.Info("step failed", zap.String("reason", p.Reason), zap.String("message", r.redactor().String(p.Message)))
	if p.TimedOut && r.req.Timeout > 0 {
		return res, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("step timed out after %s: %s", r.req.Timeout, msg), activities.ErrTypeStepTimeout, nil, res)
	}
	return res, framework.StepFailed(msg, res)
}

// expire lets a finished object of a wide step's item delete itself
// (KubeStepRequest.DeleteAfter) once its outcome has been read: err is
// what the step returns, and a retryable one (the outputs could not be
// read yet) keeps the object for the retry. A failed request is only
// logged: the run's end sweeps what is left.
func (r *stepRun) expire(ctx context.Context, obj framework.Object, err error) {
	e, ok := r.kind.(framework.Expiring)
	if !ok || r.req.DeleteAfter <= 0 {
		return
	}
	var app *temporal.ApplicationError
	if err != nil && !(errors.As(err, &app) && app.NonRetryable()) {
		return
	}
	if err := e.ExpireAfter(ctx, obj, r.req.DeleteAfter); err != nil && !apierrors.IsNotFound(err) {
		r.logger.Warn("cannot set the finished object to delete itself; the run's end deletes it",
			zap.Duration("after", r.req.DeleteAfter), zap.Error(err))
	}
}

func failureMessage(kind, name, reason, message string) string {
	if reason == "" {
		reason = "Failed"
	}
	msg := fmt.Sprintf("%s %s failed: %s", kind, name, reason)
	if message != "" {
		msg += ": " + message
	}
	return msg
}

// stuck fails a step whose pod could not start within the grace (or can
// never start: Trouble.Permanent), deleting the object so the pod stops
// retrying (and holding its node's resources).
func (r *stepRun) stuck(p framework.Progress) (activities.KubeStepResult, error) {
	r.deleteAndWait()
	res := r.result()
	res.FinishedAt = r.b.clock.Now()
	res.Links = p.Links
	why := fmt.Sprintf("%s (pod could not start for %s)", p.Stuck.Message, r.b.pullGrace)
	if p.Stuck.Permanent {
		why = p.Stuck.Message + " (this cannot resolve: the pod's image and pull policy do not change)"
	}
	msg := failureMessage(r.kind.Kind(), r.name, p.Stuck.Reason, why)
	return res, framework.StepFailed(msg, res)
}

func (r *stepRun) timedOut() (activities.KubeStepResult, error) {
	r.logger.Info("step timed out; deleting", zap.Duration("timeout", r.req.Timeout))
	r.deleteAndWait()
	res := r.result()
	res.FinishedAt = r.b.clock.Now()
	return res, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("step timed out after %s; %s %s was deleted", r.req.Timeout, r.kind.Kind(), r.name),
		activities.ErrTypeStepTimeout, nil, res)
}

// interrupted handles ctx ending (or a watch that cannot start): a
// cancelled step's object is deleted, unless the worker is shutting down,
// in which case the step keeps running for the retry to resume.
func (r *stepRun) interrupted(ctx context.Context, stop <-chan struct{}, err error) (activities.KubeStepResult, error) {
	select {
	case <-stop:
		return r.result(), r.stopping()
	default:
	}
	if ctx.Err() == nil {
		if errors.Is(err, framework.ErrClosed) {
			err = errBackendClosed
		}
		r.leftRunning = true
		return r.result(), err // the backend was closed: retryable
	}
	if !cancelRequested(ctx) {
		// Temporal no longer knows this execution (its heartbeat timed out
		// during a stall and a retry took over, or the activity's own
		// timeout fired): the retry adopts the object, so it must stay.
		r.leftRunning = true
		r.logger.Warn("activity execution superseded; leaving the object to the retry",
			zap.NamedError("cause", context.Cause(ctx)))
		return r.result(), fmt.Errorf("this execution of the step was superseded (%v); %s %s keeps running for the retry", context.Cause(ctx), r.kind.Kind(), r.name)
	}
	r.logger.Info("step cancelled; deleting")
	r.deleteAndWait()
	res := r.result()
	res.FinishedAt = r.b.clock.Now()
	return res, ctx.Err()
}

// cancelRequested tells a cancel of the step (the run was cancelled, or its
// workflow asked) from the other ways an activity's context ends: a
// heartbeat answered NotFound because the execution timed out and was
// retried, the activity's timeout, a pause or reset. Only the first may
// delete the step's objects.
func cancelRequested(ctx context.Context) bool {
	return temporal.IsCanceledError(context.Cause(ctx))
}

func (r *stepRun) stopping() error {
	r.leftRunning = true
	r.logger.Info("worker stopping; leaving the step running for a retry to resume")
	return fmt.Errorf("worker is stopping: %s %s keeps running and a retry of this activity resumes waiting for it", r.kind.Kind(), r.name)
}

// deleteAndWait deletes the object with foreground propagation (its pods
// and clusters go first) and waits, bounded, until it is gone. An object
// still present with a deletionTimestamp at the bound is being deleted,
// which is enough: the garbage collector finishes the job.
func (r *stepRun) deleteAndWait() {
	b := r.b
	ctx, cancel := context.WithTimeout(context.Background(), b.deleteWait)
	defer cancel()
	deleteObject(ctx, r.kind, r.ns, r.name, r.uid, r.logger)
	if r.objSub == nil {
		return
	}
	for {
		o, ok := r.objects.Get(r.key)
		if (ok && o.GetUID() != r.uid) || r.objSub.Deleted(r.uid) {
			return
		}
		// Missing from the cache may only mean the informer has not seen
		// the object yet (a cancel right after it was created): ask the
		// API server, and poll it while the cache knows nothing.
		if !ok && goneLive(ctx, r.kind, r.ns, r.name, r.uid) {
			return
		}
		poll := time.After(deletePoll)
		if ok {
			poll = nil // the cache will say when it goes
		}
		select {
		case <-r.objSub.C:
		case <-poll:
		case <-ctx.Done():
			r.logger.Info("object still being deleted; not waiting longer", zap.Duration("waited", b.deleteWait))
			return
		}
	}
}

// deletePoll is how often deleteAndWait asks the API server while its
// informer has not seen the object.
const deletePoll = 100 * time.Millisecond

// goneLive reports whether the API server no longer has the object with
// uid (a failed read counts as not gone: the wait is bounded anyway).
func goneLive(ctx context.Context, res framework.Resource, ns, name string, uid types.UID) bool {
	o, err := res.Get(ctx, ns, name)
	if apierrors.IsNotFound(err) {
		return true
	}
	return err == nil && o.GetUID() != uid
}

// deleteObject deletes one object, foreground, only if it is still the
// object with uid.
func deleteObject(ctx context.Context, res framework.Resource, ns, name string, uid types.UID, logger *zap.Logger) bool {
	fg := metav1.DeletePropagationForeground
	opts := metav1.DeleteOptions{PropagationPolicy: &fg}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := res.Delete(ctx, ns, name, opts)
	switch {
	case err == nil:
		return true
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return true // already gone, or replaced by another object
	default:
		logger.Warn("cannot delete object; run cleanup will retry", zap.String("kind", res.Kind()),
			zap.String("name", ns+"/"+name), zap.Error(err))
		return false
	}
}

// outputTermination reads the output pod's terminated container.
//
// The first read is served from the API server's watch cache at a
// resourceVersion no older than obj's — the terminal status just observed.
// That is enough: the operator saw the pod terminate before it wrote that
// status, so the pod's final state has an older resourceVersion. It spares
// the consistent read (a round trip to etcd per list), which is what a
// burst of finishing steps would otherwise queue on. A failed cached read
// (e.g. another API server whose cache lags) falls back to a consistent
// one.
//
// When the pod exists but its container has not terminated yet (an
// operator may report success a moment before its submitter pod exits), it
// re-reads, consistently, for up to wait. Polling is fine here: it is one
// short, bounded wait per step, on a path that is almost never taken.
func (b *Backend) outputTermination(ctx context.Context, ns string, obj framework.Object, op framework.OutputPods, wait time.Duration) (framework.Termination, bool, error) {
	deadline := b.clock.Now().Add(wait)
	opts := metav1.ListOptions{LabelSelector: op.Selector}
	if rv := obj.GetResourceVersion(); rv != "" {
		opts.ResourceVersion, opts.ResourceVersionMatch = rv, metav1.ResourceVersionMatchNotOlderThan
	}
	for {
		pods, err := b.clients.Kube.CoreV1().Pods(ns).List(ctx, opts)
		if err != nil && opts.ResourceVersion != "" && ctx.Err() == nil {
			opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
			continue
		}
		if err != nil {
			return framework.Termination{}, false, fmt.Errorf("list output pods (%s): %w", op.Selector, err)
		}
		term, ok, pending := framework.OutputTermination(pods.Items, op.Container)
		if ok || !pending || b.clock.Now().After(deadline) {
			return term, ok, nil
		}
		opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
		select {
		case <-b.clock.After(200 * time.Millisecond):
		case <-ctx.Done():
			return framework.Termination{}, false, ctx.Err()
		}
	}
}
