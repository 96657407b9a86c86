package workflows

import (
	"errors"
	"fmt"
	"math"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Outputs are the JSON outputs a step wrote (a JSON object).
type Outputs map[string]any

// StepOption adjusts how a step runs.
type StepOption func(*stepConfig)

type stepConfig struct {
	retries   pipeline.Retries
	timeout   time.Duration
	placement *pipeline.Placement
	// target, when set, is the cluster the work runs on, chosen already
	// (onCluster): no selection, and no sweep by this workflow.
	target *kubeTarget
	// deleteAfter: the Job deletes itself this long after it finished
	// (0: the run's end deletes it).
	deleteAfter time.Duration
	// cache is the step's caching (WithCache); nil when off.
	cache *pipeline.Cache
	// metrics: the step declared metrics (WithMetrics).
	metrics bool
	// firstAttempt numbers the first attempt of runAttempts (0 means 1);
	// preempted counts attempts lost to GPU preemption before it, which do
	// not count against retries.
	firstAttempt, preempted int
	// requeued reports whether a cancellation is a GPU preemption, after
	// which the step queues again: its CANCELLED is not its final state.
	requeued func() bool
}

// WithRetries re-runs failed attempts with exponential backoff.
func WithRetries(r pipeline.Retries) StepOption { return func(c *stepConfig) { c.retries = r } }

// WithTimeout bounds each attempt.
func WithTimeout(d time.Duration) StepOption { return func(c *stepConfig) { c.timeout = d } }

// WithMetrics says the container step reports metrics (its
// $ATELIER_METRICS file), as a spec step's `metrics` declares: on a
// Kubernetes cluster (WithPlacement) it then runs under the launcher,
// which stores the file for the cluster's worker to read, so it needs a
// command (the image's entrypoint is not known to Atelier), and a worker
// without the launcher fails it saying what it lacks. The local runtime
// reads the file of every step, with or without it.
func WithMetrics() StepOption { return func(c *stepConfig) { c.metrics = true } }

// StepFuture is the pending result of a step started with Run.Container.
type StepFuture struct {
	f    workflow.Future
	name string
}

// Get blocks (deterministically) until the step ends and returns its outputs.
// A failed step returns a *StepError; a cancelled one an error for which
// temporal.IsCanceledError is true.
func (f StepFuture) Get(ctx workflow.Context) (Outputs, error) {
	var out Outputs
	err := f.f.Get(ctx, &out)
	return out, err
}

// Name is the (unique) name the step got in the run status.
func (f StepFuture) Name() string { return f.name }

// StepError is how a failed step is reported to pipeline code.
type StepError struct {
	Step     string
	Attempts int
	Message  string
}

func (e *StepError) Error() string {
	if e.Attempts == 0 { // a forEach as a whole, or a step that never ran
		return fmt.Sprintf("step %q failed: %s", e.Step, e.Message)
	}
	return fmt.Sprintf("step %q failed after %d attempt(s): %s", e.Step, e.Attempts, e.Message)
}

// Container starts a container step: a local process on the local runtime,
// or a Kubernetes Job when WithPlacement is given.
// ctx must be the context returned by Begin (or derived from it) so that
// cancelling the run cancels the step. The step's name must be a DNS label;
// repeating a name gives the later step a numeric suffix.
func (r *Run) Container(ctx workflow.Context, name string, c pipeline.Container, opts ...StepOption) StepFuture {
	st := r.addStep(name, string(pipeline.KindContainer))
	if f, ok := r.reusedStep(ctx, st); ok {
		return f
	}
	fut, set := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(gctx workflow.Context) {
		w := stepWork{kind: pipeline.KindContainer, container: &c}
		if c.Resources != nil {
			w.gpus, w.gpuType = c.Resources.GPU, c.Resources.GPUType
		}
		out, err := r.runWork(gctx, st, st.Name, nil, w, opts...)
		if err != nil {
			if errors.Is(err, errCancelled) {
				err = temporal.NewCanceledError(st.Name)
			}
			set.Set(nil, err)
			return
		}
		set.Set(out, nil)
	})
	return StepFuture{f: fut, name: st.Name}
}

// attemptOutcome is what one attempt reported, whatever ran it.
type attemptOutcome struct {
	activities.ContainerResult
	Cluster string
	Object  string
	Links   map[string]string
}

// attemptFunc runs attempt n of a step and reports its outcome. The error is
// the activity's (a step failure is an ApplicationError; see
// describeActivityError).
type attemptFunc func(ctx workflow.Context, attempt int) (attemptOutcome, error)

func newStepConfig(opts []StepOption) stepConfig {
	cfg := stepConfig{timeout: pipeline.DefaultStepTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.timeout <= 0 {
		cfg.timeout = pipeline.DefaultStepTimeout
	}
	return cfg
}

// stepActivityOptions are shared by every step activity, local or remote.
func stepActivityOptions(ctx workflow.Context, timeout time.Duration, taskQueue string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: taskQueue, // "" = the workflow's own queue
		// The attempt timeout is enforced by the activity (it kills the
		// process group / deletes the object); this is the backstop if the
		// activity itself hangs.
		StartToCloseTimeout: timeout + time.Minute,
		// Short so a killed worker's step is retried quickly on another one;
		// heartbeats also carry cancellation to the process.
		HeartbeatTimeout:    10 * time.Second,
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			// Only infrastructure failures (lost worker, timeouts of the
			// activity itself) retry here; step failures are retried by the
			// attempt loop so each attempt is visible.
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    30 * time.Second,
			MaximumAttempts:    10,
			NonRetryableErrorTypes: []string{
				activities.ErrTypeStepFailed, activities.ErrTypeStepTimeout,
				activities.ErrTypeInvalidStep, activities.ErrTypeBadOutputs,
			},
		},
	})
}

// runContainer runs every attempt of one container step (or forEach item)
// on the local runtime and keeps st current.
func (r *Run) runContainer(ctx workflow.Context, st *runstate.StepStatus, stepName string, item *int, c pipeline.Container, opts ...StepOption) (Outputs, error) {
	cfg := newStepConfig(opts)
	actx := stepActivityOptions(ctx, cfg.timeout, "")
	inputs, msg := r.artifactInputs(stepName, item, c.Artifacts)
	if msg != "" {
		r.endStep(st, runstate.StepFailed, msg, "")
		return nil, &StepError{Step: st.Name, Message: msg}
	}
	st.Inputs = inputs
	var outputs []pipeline.ArtifactOutput
	if c.Artifacts != nil {
		outputs = c.Artifacts.Outputs
	}
	return r.runAttempts(ctx, st, cfg, func(_ workflow.Context, attempt int) (attemptOutcome, error) {
		req := activities.ContainerRequest{
			Project: r.status.Project, RunID: r.status.RunID, Step: stepName, Item: item, Attempt: attempt,
			Image: c.Image, Command: c.Command, Args: c.Args, Env: c.Env, WorkingDir: c.WorkingDir, Timeout: cfg.timeout,
			Secrets: c.Secrets, Inputs: inputs, Outputs: outputs,
		}
		if c.Resources != nil {
			req.GPU, req.GPUType = c.Resources.GPU, c.Resources.GPUType
		}
		var res activities.ContainerResult
		actx := withAttemptSummary(actx, stepName, item, attempt)
		err := workflow.ExecuteActivity(actx, activities.RunContainerName, req).Get(actx, &res)
		var appErr *temporal.ApplicationError
		if err != nil && errors.As(err, &appErr) && appErr.HasDetails() {
			_ = appErr.Details(&res) // a failed attempt's times and exit code
		}
		return attemptOutcome{ContainerResult: res}, err
	})
}

// runAttempts is the attempt loop every step kind shares: it records each
// attempt, retries step failures with backoff as configured, and returns
// errCancelled when the run was cancelled.
func (r *Run) runAttempts(ctx workflow.Context, st *runstate.StepStatus, cfg stepConfig, run attemptFunc) (Outputs, error) {
	now := workflow.Now(ctx)
	if st.StartedAt == nil {
		r.countStepStarted(st)
	}
	st.StartedAt = &now
	cancelled := func(msg string) {
		r.endStepAs(st, runstate.StepCancelled, "", msg, cfg.requeued == nil || !cfg.requeued())
	}
	for attempt := max(cfg.firstAttempt, 1); ; attempt++ {
		due := workflow.Now(ctx) // dependencies done, or the backoff over
		if ctx.Err() != nil {
			cancelled("run cancelled before the attempt started")
			return nil, errCancelled
		}
		// Queued, not refused, past the run's in-flight bound (Temporal
		// caps pending activities per workflow).
		if err := workflow.Await(ctx, func() bool { return r.inflight < MaxInflightAttempts }); err != nil {
			cancelled("run cancelled before the attempt started")
			return nil, errCancelled
		}
		if msg := historyLimitError(ctx); msg != "" {
			r.endStep(st, runstate.StepFailed, msg, "")
			return nil, &StepError{Step: st.Name, Attempts: attempt - 1, Message: msg}
		}
		started := workflow.Now(ctx)
		st.State = runstate.StepRunning
		st.Attempts = append(st.Attempts, runstate.Attempt{Number: attempt, State: runstate.StepRunning, StartedAt: &started})
		r.touch()
		r.publishDetails() // Go pipelines have no scheduling loop that would
		r.countAttemptStarted(st)

		r.inflight++
		res, err := run(ctx, attempt)
		r.inflight--
		a := &st.Attempts[len(st.Attempts)-1]
		if !res.StartedAt.IsZero() {
			a.StartedAt = &res.StartedAt
		}
		finished := workflow.Now(ctx)
		if !res.FinishedAt.IsZero() {
			finished = res.FinishedAt
		}
		a.FinishedAt = &finished
		a.Cluster, a.Object, a.Links = res.Cluster, res.Object, res.Links
		if res.Execution > 1 {
			a.Execution = res.Execution
		}

		if err == nil {
			code := res.ExitCode
			a.ExitCode, a.State, a.Message = &code, runstate.StepSucceeded, ""
			r.countAttemptEnded(st, a, due, res.StartedAt)
			st.Outputs, st.Artifacts, st.Metrics = res.Outputs, res.Artifacts, res.Metrics
			r.endStep(st, runstate.StepSucceeded, "", "")
			return res.Outputs, nil
		}
		if ctx.Err() != nil || temporal.IsCanceledError(err) {
			a.State, a.Error = runstate.StepCancelled, "cancelled"
			r.countAttemptEnded(st, a, due, res.StartedAt)
			cancelled("run cancelled")
			return nil, errCancelled
		}

		msg, errType, code := describeActivityError(err)
		a.State, a.Error, a.ExitCode = runstate.StepFailed, msg, code
		r.countAttemptEnded(st, a, due, res.StartedAt)
		retryable := errType == activities.ErrTypeStepFailed || errType == activities.ErrTypeStepTimeout || errType == ""
		if !retryable || attempt-cfg.preempted > cfg.retries.Limit {
			r.endStep(st, runstate.StepFailed, msg, "")
			return nil, &StepError{Step: st.Name, Attempts: attempt, Message: msg}
		}
		st.State = runstate.StepRetrying
		st.Message = fmt.Sprintf("attempt %d failed; retrying", attempt)
		r.touch()
		if err := workflow.Sleep(ctx, backoff(cfg.retries, attempt)); err != nil {
			cancelled("run cancelled while waiting to retry")
			return nil, errCancelled
		}
		st.Message = ""
	}
}

func (r *Run) endStep(st *runstate.StepStatus, state runstate.StepState, errMsg, msg string) {
	r.endStepAs(st, state, errMsg, msg, true)
}

// endStepAs is endStep; final says whether state is the step's last (it
// is counted in the step metrics once, when it is).
func (r *Run) endStepAs(st *runstate.StepStatus, state runstate.StepState, errMsg, msg string, final bool) {
	now := workflow.Now(r.root)
	counted := st.State.Terminal() // ended before (a second end changes no count)
	st.State, st.FinishedAt = state, &now
	if errMsg != "" {
		st.Error = errMsg
	}
	if msg != "" {
		st.Message = msg
	}
	if state == runstate.StepFailed {
		r.notice(st)
	}
	if final && !counted {
		r.countStepEnded(st)
	}
	r.touch()
}

// describeActivityError turns an activity failure into the message shown on
// the step, its application error type and, when known, the exit code.
func describeActivityError(err error) (msg, errType string, exitCode *int) {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		var res activities.ContainerResult
		if appErr.HasDetails() && appErr.Details(&res) == nil && appErr.Type() == activities.ErrTypeStepFailed {
			code := res.ExitCode
			exitCode = &code
		}
		return appErr.Message(), appErr.Type(), exitCode
	}
	var timeoutErr *temporal.TimeoutError
	if errors.As(err, &timeoutErr) {
		return fmt.Sprintf("activity timed out (%s); the worker running it may have stopped", timeoutErr.TimeoutType()), "", nil
	}
	return err.Error(), "", nil
}

// backoff is the wait before attempt+1: Backoff * Factor^(attempt-1), capped.
func backoff(r pipeline.Retries, attempt int) time.Duration {
	base, maxB, factor := r.Backoff.D(), r.MaxBackoff.D(), r.Factor
	if base <= 0 {
		base = time.Second
	}
	if maxB <= 0 {
		maxB = 5 * time.Minute
	}
	if factor < 1 {
		factor = 2
	}
	d := float64(base) * math.Pow(factor, float64(attempt-1))
	if d > float64(maxB) {
		return maxB
	}
	return time.Duration(d)
}
