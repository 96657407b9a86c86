package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// DefaultProject is used for runs started without the AtelierProject search
// attribute (e.g. straight from the Temporal SDK without options).
const DefaultProject = "default"

// Run is the bookkeeping shared by every Atelier pipeline workflow, declarative
// or native Go: the observable RunStatus (served by the "status" query), the
// cancel signal, the AtelierState search attribute and the Postgres mirror.
//
// A Run is confined to its workflow's coroutines; it is not goroutine-safe in
// the Go sense and needs not be (workflow coroutines never run in parallel).
type Run struct {
	status runstate.Status
	steps  []*runstate.StepStatus

	// stepCtx is the context steps run under. It is cancelled by the cancel
	// signal, the pipeline deadline or Temporal's own cancel request.
	stepCtx    workflow.Context
	cancelStep workflow.CancelFunc
	root       workflow.Context

	cancelled bool // cancel signal or Temporal cancel
	deadline  bool // pipeline deadline passed

	mirrored int64 // highest Seq the mirror has written
	// detailsSeq is the Seq publishDetails last rendered.
	detailsSeq int64
	closing    bool

	inflight int // step attempts in flight (MaxInflightAttempts)

	// Exit handlers and notifications (onexit.go).
	exit exitState
	// cacheGuard memoises stepCacheOn: 0 not asked, 1 off, 2 on.
	cacheGuard int
	// resolvedRefs are the catalogue inputs resolved for each step (item)
	// about to run (resolveArtifactRefs), by refKey.
	resolvedRefs map[string][]runstate.Artifact
	// fanIns are the wide steps' artifacts assembled for the steps that
	// read them (resolveWideFanIns), by fanInKey.
	fanIns map[string]*wideFanIn
	// cacheStores counts step cache stores in flight (awaitCacheStores).
	cacheStores int

	// controlQueues: bookkeeping activities run on their workers' control
	// queues (activities.ControlTaskQueue). False in runs started before
	// that existed, which replay with everything on the step queues.
	controlQueues bool
	taskQueue     string // the workflow's own task queue

	// Kubernetes bookkeeping (kube.go): clusters used, shared RayClusters.
	kubeClusters []kubeTarget
	rayTemplates []pipeline.SharedRayCluster
	sharedRay    map[string]*sharedRay
	sharedOrder  []string // sharedRay's names in the order first used (maps have none)

	// GPU admission (gpu_step.go): steps waiting for their workload.
	gpuWaiters map[string]*gpuWaiter
	gpuGrants  map[string]*gpuGrant // admitted steps, by workload
	gpuPrio    *int
	batch      *batcher // batched selections, submissions, releases (batching.go)

	// Child runs (child.go): where this run sits, and when its deadline
	// passes (zero: none), which bounds its own children.
	parent     *ParentRun
	deadlineAt time.Time

	// goReuse is a Go pipeline retry's plan (goretry.go): the steps,
	// by name, that take the retried run's outputs instead of running.
	goReuse *runstate.Reuse
}

// RunOptions describe a run when it begins.
type RunOptions struct {
	Project  string
	Pipeline string
	Version  int
	Params   map[string]any
	// Deadline bounds the whole run (0 = none).
	Deadline time.Duration
	// GPUPriority is the priority of the run's GPU steps in GPU admission
	// (nil: the project's default; it must lie in the project's range).
	GPUPriority *int
	// RetryOf is the run this one retries (its status says so).
	RetryOf string
	// ExitTimeout bounds the exit handlers registered with OnExit, as a
	// whole (0: spec.DefaultOnExitTimeout).
	ExitTimeout time.Duration
	// CacheBypass runs every cached step instead of looking it up; its
	// successful results still replace the cache's entries.
	CacheBypass bool
	// Parent is set on a child run (a pipeline step of another run
	// started it): its status links to the parent, and the parent's
	// NotAfter bounds its deadline.
	Parent *ParentRun
}

// versionControlQueues guards moving bookkeeping activities to control
// task queues (workflow.GetVersion change ID; never reuse it).
const versionControlQueues = "atelier.control-queues"

// controlQueue is where a bookkeeping activity for step queue q goes: q
// itself in runs from before control queues ("" = the workflow's own
// queue).
func (r *Run) controlQueue(q string) string {
	if !r.controlQueues {
		return q
	}
	if q == "" {
		q = r.taskQueue
	}
	return activities.ControlTaskQueue(q)
}

// Begin starts the bookkeeping of a run and returns it with the context that
// steps must use: it is cancelled when the run is cancelled (cancel signal or
// Temporal cancel request) or its deadline passes.
func Begin(ctx workflow.Context, opts RunOptions) (*Run, workflow.Context, error) {
	info := workflow.GetInfo(ctx)
	project := opts.Project
	if project == "" {
		project = projectFromSearchAttributes(ctx)
	}
	now := workflow.Now(ctx)
	r := &Run{root: ctx, taskQueue: info.TaskQueueName, gpuPrio: opts.GPUPriority, parent: opts.Parent}
	r.exit.timeout = opts.ExitTimeout
	r.status = runstate.Status{
		RunID:     info.WorkflowExecution.ID,
		Project:   project,
		Pipeline:  opts.Pipeline,
		Version:   opts.Version,
		Workflow:  info.WorkflowType.Name,
		State:     runstate.Running,
		StartedAt: &now,
		Params:    opts.Params,
		// Read from the attribute Temporal sets on a scheduled start: it
		// changes the status only, never a command.
		ScheduleID:  scheduleOf(ctx, project),
		CreatedBy:   createdByOf(ctx, project),
		RetryOf:     opts.RetryOf,
		CacheBypass: opts.CacheBypass,
	}
	if opts.Parent != nil {
		r.status.ParentRun, r.status.ParentStep = opts.Parent.RunID, opts.Parent.Step
	}
	// A retry of a Go pipeline: its plan comes with the start, in the
	// memo (a declarative retry's comes in its input and RetryOf).
	reuse, warning := goReuseFromMemo(ctx)
	if reuse != nil {
		r.goReuse = reuse
		if r.status.RetryOf == "" {
			r.status.RetryOf = reuse.RetryOf
		}
	}
	if warning != "" {
		r.status.Warnings = append(r.status.Warnings, warning)
	}
	r.stepCtx, r.cancelStep = workflow.WithCancel(ctx)
	r.controlQueues = workflow.GetVersion(ctx, versionControlQueues, workflow.DefaultVersion, 1) >= 1

	if err := workflow.SetQueryHandler(ctx, runstate.QueryStatus, func() (runstate.Status, error) {
		return r.Status(), nil
	}); err != nil {
		return nil, nil, fmt.Errorf("register status query: %w", err)
	}
	// Registering a handler adds no command, so histories from before
	// approvals replay unchanged.
	if err := r.registerApprovals(ctx); err != nil {
		return nil, nil, err
	}

	// One coroutine waits for both ways to cancel: the REST signal and
	// Temporal's native cancel request (UI, CLI, SDK), which must lead to
	// the same cleanup. (Every coroutine is visited on every workflow task,
	// so fewer of them keep the per-step overhead down.)
	//
	// The same coroutine takes the steps' progress signals (why a
	// Kubernetes step is not running yet). They only change the status
	// the query serves, never a command, so histories recorded before
	// they existed replay unchanged.
	sig := workflow.GetSignalChannel(ctx, runstate.SignalCancel)
	progress := workflow.GetSignalChannel(ctx, activities.SignalStepProgress)
	//
	// After Temporal's cancel request it keeps taking signals (a second
	// cancel stops the exit handlers, onexit.go); a run from before exit
	// handlers ignores them then, as it did when this coroutine returned.
	workflow.Go(ctx, func(gctx workflow.Context) {
		temporalCancel := false
		for {
			var req runstate.CancelRequest
			received, gotProgress := false, false
			var p activities.StepProgress
			sel := workflow.NewSelector(gctx)
			sel.AddReceive(sig, func(c workflow.ReceiveChannel, _ bool) { received = c.Receive(gctx, &req) })
			sel.AddReceive(progress, func(c workflow.ReceiveChannel, _ bool) { gotProgress = c.Receive(gctx, &p) })
			if !temporalCancel {
				sel.AddReceive(gctx.Done(), func(workflow.ReceiveChannel, bool) {})
			}
			sel.Select(gctx)
			if gotProgress {
				r.stepProgress(p)
				continue
			}
			if received {
				r.requestCancel(&req)
				continue
			}
			if ctx.Err() != nil && !temporalCancel {
				temporalCancel = true
				r.requestCancel(&runstate.CancelRequest{Reason: "cancel requested through Temporal", Requester: "temporal", At: workflow.Now(ctx)})
			}
		}
	})
	deadline, deadlineMsg := opts.Deadline, fmt.Sprintf("pipeline deadline of %s exceeded", opts.Deadline)
	if p := opts.Parent; p != nil && p.NotAfter != nil {
		if left := p.NotAfter.Sub(now); deadline == 0 || left < deadline {
			// At least a moment, so that a bound already past still ends
			// the run through its deadline (FAILED, with cleanup).
			deadline = max(left, time.Millisecond)
			deadlineMsg = fmt.Sprintf("deadline exceeded: the parent run %s's deadline or its step %q's timeout passed (%s)", p.RunID, p.Step, p.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	if deadline > 0 {
		r.deadlineAt = now.Add(deadline)
		workflow.Go(ctx, func(gctx workflow.Context) {
			// Sleep on this coroutine's own context; a run that ends first
			// simply leaves the timer behind.
			// The deadline does not apply to exit handlers (they have
			// their own timeout), nor to a run whose steps have ended.
			if err := workflow.Sleep(gctx, deadline); err == nil && !r.cancelled && !r.status.State.Terminal() && !r.exit.begun {
				r.deadline = true
				r.status.Error = deadlineMsg
				r.cancelStep()
				r.touch()
			}
		})
	}

	r.startMirror(ctx)
	r.upsertState(ctx)
	r.touch()
	r.countBegun()
	return r, r.stepCtx, nil
}

// scheduleOf is the name of the Atelier schedule that started the run
// (Temporal's TemporalScheduledById attribute holds the schedule's ID,
// atelier-schedule/<project>/<name>), or "".
func scheduleOf(ctx workflow.Context, project string) string {
	id, _ := workflow.GetTypedSearchAttributes(ctx).GetKeyword(temporal.NewSearchAttributeKeyKeyword("TemporalScheduledById"))
	return strings.TrimPrefix(id, "atelier-schedule/"+project+"/")
}

// createdByOf is, for a run a schedule started, the AtelierCreatedBy
// search attribute it started with (the token that created the
// schedule), or "": the gateway's own rows already name their creator,
// and a run started through the SDK names none.
func createdByOf(ctx workflow.Context, project string) string {
	if scheduleOf(ctx, project) == "" {
		return ""
	}
	by, _ := workflow.GetTypedSearchAttributes(ctx).GetKeyword(temporal.NewSearchAttributeKeyKeyword(runstate.SACreatedBy))
	return by
}

func projectFromSearchAttributes(ctx workflow.Context) string {
	sa := workflow.GetTypedSearchAttributes(ctx)
	if v, ok := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(runstate.SAProject)); ok && v != "" {
		return v
	}
	return DefaultProject
}

func (r *Run) requestCancel(req *runstate.CancelRequest) {
	if r.exit.running {
		r.stopExit(fmt.Sprintf("exit handlers stopped: cancel requested by %s: %s", req.Requester, req.Reason))
		return
	}
	if r.cancelled || r.status.State.Terminal() {
		return
	}
	r.cancelled = true
	if req.At.IsZero() {
		req.At = workflow.Now(r.root)
	}
	r.status.Cancel = req
	r.status.State = runstate.Cancelling
	r.cancelStep()
	r.upsertState(r.root)
	r.touch()
}

// stepProgress records why a running attempt waits. A report for an
// attempt that has ended (a late signal) is ignored.
func (r *Run) stepProgress(p activities.StepProgress) {
	st := r.stepByName(p.Step)
	if st != nil && p.Item != nil {
		if *p.Item < 0 || *p.Item >= len(st.Items) {
			return
		}
		st = &st.Items[*p.Item]
	}
	if st == nil || p.Attempt < 1 || p.Attempt > len(st.Attempts) {
		return
	}
	a := &st.Attempts[p.Attempt-1]
	if a.State != runstate.StepRunning || a.Message == p.Message {
		return
	}
	a.Message = p.Message
	r.touch()
}

// Cancelled reports whether the run was asked to stop (signal or Temporal).
func (r *Run) Cancelled() bool { return r.cancelled }

// DeadlineExceeded reports whether the pipeline deadline stopped the run.
func (r *Run) DeadlineExceeded() bool { return r.deadline }

// Project is the tenant that owns the run.
func (r *Run) Project() string { return r.status.Project }

// ID is the run ID (the workflow ID).
func (r *Run) ID() string { return r.status.RunID }

// Status returns a snapshot of the observable state.
func (r *Run) Status() runstate.Status {
	s := r.status
	// Exit handlers are added first (shown PENDING from the start) but
	// run last: they are listed last, as users read the table top down.
	s.Steps = make([]runstate.StepStatus, 0, len(r.steps))
	for _, exit := range []bool{false, true} {
		for _, st := range r.steps {
			if st.OnExit == exit {
				s.Steps = append(s.Steps, st.Clone())
			}
		}
	}
	s.Warnings = append([]string(nil), s.Warnings...)
	boundStatus(&s)
	return s
}

// touch records that something observable changed.
func (r *Run) touch() { r.status.Seq++ }

// addStep registers a step so it shows in the status. Names are unique: a
// repeated name gets a numeric suffix so logs stay addressable.
func (r *Run) addStep(name, kind string) *runstate.StepStatus {
	base, n := name, 1
	for r.stepByName(name) != nil {
		n++
		name = fmt.Sprintf("%s-%d", base, n)
	}
	st := &runstate.StepStatus{Name: name, Kind: kind, State: runstate.StepPending, OnExit: r.exit.running}
	r.steps = append(r.steps, st)
	r.touch()
	return st
}

func (r *Run) stepByName(name string) *runstate.StepStatus {
	for _, st := range r.steps {
		if st.Name == name {
			return st
		}
	}
	return nil
}

func (r *Run) upsertState(ctx workflow.Context) {
	_ = workflow.UpsertTypedSearchAttributes(ctx,
		temporal.NewSearchAttributeKeyKeyword(runstate.SAState).ValueSet(string(r.status.State)))
}

// mirrorTrigger is the part of the state whose change is mirrored to
// Postgres immediately. Step-level progress is served live by the status
// query and written to Postgres with the next run-level change (at the
// latest when the run ends): mirroring every step transition would put an
// extra workflow task next to every step and cost more than the whole
// orchestration budget (see docs/benchmarks.md).
//
// Notable step events (a step FAILED, an approval requested: what webhooks
// announce, see notice) are mirrored at once too, so that Postgres holds
// them when they happen; they cost a write only when they happen.
func (r *Run) mirrorTrigger() string {
	if r.exit.notices == 0 {
		return string(r.status.State)
	}
	return fmt.Sprintf("%s#%d", r.status.State, r.exit.notices)
}

// startMirror keeps Postgres' copy of the run current with at most one
// mirror activity in flight; bursts of changes coalesce into one write.
func (r *Run) startMirror(ctx workflow.Context) {
	mctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           r.controlQueue(""),
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    500 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    30 * time.Second,
			MaximumAttempts:    20,
		},
	})
	// Disconnected: the final state must reach Postgres even when the
	// workflow itself was cancelled.
	mctx, _ = workflow.NewDisconnectedContext(mctx)
	lastTrigger := ""
	workflow.Go(mctx, func(gctx workflow.Context) {
		for {
			_ = workflow.Await(gctx, func() bool {
				return r.mirrorTrigger() != lastTrigger || (r.closing && r.mirrored < r.status.Seq)
			})
			lastTrigger = r.mirrorTrigger()
			snap := r.Status()
			err := workflow.ExecuteActivity(gctx, activities.MirrorRunName, snap).Get(gctx, nil)
			if err != nil {
				workflow.GetLogger(gctx).Warn("mirroring run to Postgres failed; the workflow query still serves it", "error", err)
			}
			r.mirrored = snap.Seq
		}
	})
}

// finish records the terminal state and waits (bounded) for the mirror.
func (r *Run) finish(state runstate.State, errMsg string) {
	dctx, _ := workflow.NewDisconnectedContext(r.root)
	// Objects go before the run is reported finished, so a terminal state
	// means nothing of the run is left on any cluster.
	r.cleanupKube(dctx)
	r.awaitCacheStores(dctx)
	now := workflow.Now(r.root)
	r.status.State = state
	r.status.FinishedAt = &now
	if errMsg != "" && r.status.Error == "" {
		r.status.Error = errMsg
	}
	r.upsertState(dctx)
	r.closing = true
	r.touch()
	r.publishDetails()
	r.countFinished()
	_, _ = workflow.AwaitWithTimeout(dctx, 10*time.Minute, func() bool { return r.mirrored >= r.status.Seq })
}

// End finishes a native Go pipeline: it waits for nothing else, records the
// terminal state from err (nil = SUCCEEDED, cancellation = CANCELLED), runs
// the exit handlers registered with OnExit, and returns the error the
// workflow function should return.
func (r *Run) End(result any, err error) error {
	switch {
	case r.cancelled:
		r.markUnfinished(runstate.StepCancelled, "run cancelled")
		r.runGoExitHandlers(runstate.Cancelled, r.cancelReason())
		r.finish(runstate.Cancelled, "")
		return temporal.NewCanceledError(r.cancelReason())
	case err != nil:
		r.markUnfinished(runstate.StepSkipped, "not started: the run failed")
		r.runGoExitHandlers(runstate.Failed, err.Error())
		r.finish(runstate.Failed, err.Error())
		return err
	default:
		r.status.Result = result
		r.runGoExitHandlers(runstate.Succeeded, "")
		r.finish(runstate.Succeeded, "")
		return nil
	}
}

func (r *Run) cancelReason() string {
	if r.status.Cancel != nil {
		return r.status.Cancel.Reason
	}
	return "cancelled"
}

// markUnfinished gives every step that never reached a terminal state a
// final one so the status never shows a PENDING step of a finished run.
// Exit handlers are not: they have not had their turn yet, or end their
// own way (markExitUnfinished).
func (r *Run) markUnfinished(state runstate.StepState, msg string) {
	for _, st := range r.steps {
		if !st.OnExit {
			r.markStepUnfinished(st, state, msg)
		}
	}
}

// markStepUnfinished is markStepUnfinished, counting each step it ends.
func (r *Run) markStepUnfinished(st *runstate.StepStatus, state runstate.StepState, msg string) {
	for i := range st.Items {
		r.markStepUnfinished(&st.Items[i], state, msg)
	}
	if !st.State.Terminal() {
		runstate.MarkUnfinished(st, state, msg)
		r.countStepEnded(st)
	}
}

// errCancelled marks step results that ended because the run was cancelled.
var errCancelled = errors.New("cancelled")
