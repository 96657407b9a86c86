package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// versionOnExit guards exit handlers and what goes with them: the mirror
// writes a run's status when a step fails or an approval is requested
// (webhooks announce both), and a cancel received while the exit handlers
// run stops them (workflow.GetVersion change ID; never reuse it). It is
// read lazily, where one of those first happens, so a run that uses none
// records no marker.
const versionOnExit = "atelier.on-exit"

// exitState is a run's exit handlers and notifications bookkeeping.
type exitState struct {
	version int // 0 unknown, 1 on, -1 a run from before versionOnExit

	// notices counts notable step events (a top-level step FAILED, an
	// approval requested); each change is mirrored at once (mirrorTrigger).
	notices int

	// Exit handlers: the phase runs between the end of the steps and the
	// run's end.
	running bool
	begun   bool          // the exit phase has begun (the steps have ended)
	timeout time.Duration // as a whole; 0: spec.DefaultOnExitTimeout
	cancel  workflow.CancelFunc
	stopped string // why they were stopped (timeout, cancel), or ""

	handlers []ExitHandler // registered by Go pipelines (OnExit)
}

// onExitVersion reports whether the run has exit handlers and
// notifications (versionOnExit), recording the marker on first use.
func (r *Run) onExitVersion() bool {
	if r.exit.version == 0 {
		r.exit.version = -1
		if workflow.GetVersion(r.root, versionOnExit, workflow.DefaultVersion, 1) >= 1 {
			r.exit.version = 1
		}
	}
	return r.exit.version > 0
}

// notice records a notable event of step st (FAILED, or an approval now
// requested) so that the mirror writes it at once. forEach items are not
// steps of their own: their step fails as a whole.
func (r *Run) notice(st *runstate.StepStatus) {
	if !r.isStep(st) || !r.onExitVersion() {
		return
	}
	r.exit.notices++
}

func (r *Run) isStep(st *runstate.StepStatus) bool {
	for _, s := range r.steps {
		if s == st {
			return true
		}
	}
	return false
}

// ExitInfo is how a run is about to end, as exit handlers see it.
type ExitInfo struct {
	// State is SUCCEEDED, FAILED or CANCELLED: the state the run ends in,
	// whatever the exit handlers do.
	State runstate.State
	// FailedSteps are the FAILED steps, in the order they were added
	// (exit handlers excluded).
	FailedSteps []string
	// Error says why the run did not succeed: its error, or a cancel's
	// reason ("" when it succeeded).
	Error string
}

// ExitHandler is a Go pipeline's exit handler (Run.OnExit). Steps it
// starts with ctx are marked as exit handlers in the run's status.
type ExitHandler func(ctx workflow.Context, exit ExitInfo) error

// OnExit registers h to run when the run ends, whatever the outcome
// (success, failure, cancel): End runs the handlers after the pipeline's
// own code has returned, last registered first (as defer does), each with
// a context that the run's cancel does not cancel. They share one timeout,
// RunOptions.ExitTimeout (default 10 min). A cancel received while they
// run stops them. Their errors do not change the run's state: each is a
// warning on the run.
//
//	run.OnExit(func(ctx workflow.Context, exit workflows.ExitInfo) error {
//		_, err := run.Container(ctx, "cleanup", pipeline.Container{Command: []string{"rm", "-rf", dir}}).Get(ctx)
//		return err
//	})
func (r *Run) OnExit(h ExitHandler) {
	r.exit.handlers = append(r.exit.handlers, h)
}

// runGoExitHandlers runs the handlers registered with OnExit.
func (r *Run) runGoExitHandlers(state runstate.State, errMsg string) {
	if len(r.exit.handlers) == 0 || !r.onExitVersion() {
		return
	}
	info := r.exitInfo(state, errMsg)
	r.runExitPhase(r.exit.timeout, func(ctx workflow.Context) {
		for i := len(r.exit.handlers) - 1; i >= 0; i-- {
			if ctx.Err() != nil {
				break
			}
			if err := r.exit.handlers[i](ctx, info); err != nil && ctx.Err() == nil {
				r.status.Warnings = append(r.status.Warnings, fmt.Sprintf("exit handler %d failed: %v", i+1, err))
			}
		}
	})
}

func (r *Run) exitInfo(state runstate.State, errMsg string) ExitInfo {
	info := ExitInfo{State: state, Error: errMsg, FailedSteps: []string{}}
	for _, st := range r.steps {
		if st.State == runstate.StepFailed && !st.OnExit {
			info.FailedSteps = append(info.FailedSteps, st.Name)
		}
	}
	return info
}

// runExitPhase runs body, the exit handlers, under a context of its own:
// disconnected from the run's (which a cancel or the deadline has
// cancelled), cancelled when timeout (0: the default) passes or a cancel
// arrives (requestCancel). It then ends what did not: exit steps that
// never ended are CANCELLED or SKIPPED with the reason, and each failed
// exit step is a warning on the run.
func (r *Run) runExitPhase(timeout time.Duration, body func(ctx workflow.Context)) {
	if timeout <= 0 {
		timeout = pipeline.DefaultOnExitTimeout
	}
	ctx, _ := workflow.NewDisconnectedContext(r.root)
	ctx, cancel := workflow.WithCancel(ctx)
	r.exit.running, r.exit.begun, r.exit.cancel = true, true, cancel
	r.touch()
	r.publishDetails()
	workflow.Go(ctx, func(gctx workflow.Context) {
		if workflow.Sleep(gctx, timeout) == nil {
			r.stopExit(fmt.Sprintf("exit handlers stopped: their timeout of %s passed", timeout))
		}
	})
	body(ctx)
	cancel() // the timer
	r.exit.running, r.exit.cancel = false, nil
	for _, st := range r.steps {
		if !st.OnExit {
			continue
		}
		switch {
		case st.State == runstate.StepCancelled && r.exit.stopped != "":
			st.Message = r.exit.stopped
		case !st.State.Terminal() && r.exit.stopped != "":
			r.markStepUnfinished(st, runstate.StepCancelled, "not started: "+r.exit.stopped)
		case !st.State.Terminal():
			r.markStepUnfinished(st, runstate.StepSkipped, "not started")
		}
		if st.State == runstate.StepFailed {
			r.status.Warnings = append(r.status.Warnings, fmt.Sprintf("exit handler %q failed: %s", st.Name, st.Error))
		}
	}
	if r.exit.stopped != "" {
		r.status.Warnings = append(r.status.Warnings, r.exit.stopped)
	}
	r.touch()
}

// stopExit stops the running exit handlers (once) and says why.
func (r *Run) stopExit(why string) {
	if !r.exit.running || r.exit.stopped != "" {
		return
	}
	r.exit.stopped = why
	r.exit.cancel()
	r.touch()
}

// addExitSteps shows a declarative pipeline's exit handlers in the status
// from the start (PENDING, marked OnExit), so a user sees what will run
// at the end. It reports false for a run from before exit handlers.
func (r *Run) addExitSteps(steps []pipeline.Step) ([]*runstate.StepStatus, bool) {
	if len(steps) == 0 || !r.onExitVersion() {
		return nil, false
	}
	out := make([]*runstate.StepStatus, len(steps))
	for i, s := range steps {
		out[i] = r.addStep(s.Name, string(kindOf(s)))
		out[i].OnExit = true
	}
	return out, true
}

// runExit runs a declarative pipeline's exit handlers (pipeline.Spec.OnExit)
// as a DAG of their own once d, the pipeline's steps, has ended; state and
// errMsg are how the run is about to end.
func (d *dag) runExit(steps []*runstate.StepStatus, state runstate.State, errMsg string) {
	in := *d.in
	in.Reuse = nil // a retry runs every exit handler again
	e := &dag{r: d.r, in: &in, p: d.p.ExitPipeline(), steps: steps, runIf: true, parent: d}
	info := d.r.exitInfo(state, errMsg)
	e.exitEnv = &pipeline.RunEnv{Exit: true, State: string(info.State), FailedSteps: info.FailedSteps, Error: info.Error}
	d.r.runExitPhase(d.p.ExitTimeout(), func(ctx workflow.Context) {
		e.ctx = ctx
		e.run()
	})
}
