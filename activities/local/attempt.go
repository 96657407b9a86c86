package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/local/supervisor"
	"github.com/atelier-ml/atelier/internal/platform/redact"
)

type stopReason int

const (
	exited stopReason = iota
	cancelled
	timedOut
	// detached: Temporal gave this execution up (a later one owns the
	// attempt) while the step's supervisor keeps it running for whoever
	// adopts it.
	detached
)

// attempt is one execution of RunContainer: the request, where its files
// live, and, once they exist, its log and process. RunContainer calls its
// methods in order; each fills in the fields the next ones use.
type attempt struct {
	r      *Runner
	req    activities.ContainerRequest
	key    activities.LogKey
	logger *zap.Logger

	stepDir     string // the step's directory under the run's: step or step-item
	attemptDir  string
	outDir      string
	outputsPath string
	workDir     string // set by prepareDirs

	prev      Heartbeat           // what an earlier execution heartbeated
	started   *supervisor.Started // what an earlier execution started, if anything
	restarted bool                // there was an earlier execution: the worker died
	rerunWhy  string              // why its step could not be adopted, if known
	execution int                 // 1, or more after a lost worker (ATELIER_EXECUTION)

	gpuWaitStart time.Time
	devices      []GPU
	runFor       time.Duration // what is left of req.Timeout after the GPU wait

	env         []string
	prog        string
	secretEnv   []string          // NAME=value of the secrets the step references
	secretFiles map[string]string // file name -> value of its secret files
	redact      *redact.Redactor  // nil: no secrets to redact

	logs      *logStream
	proc      *supervisor.Process
	adopted   bool     // proc was started by an earlier execution
	left      bool     // this execution detached from proc, which runs on
	output    *os.File // the step's output file, read by streamLogs
	waited    chan waitResult
	pid, pgid int
	startedAt time.Time
	readStop  chan struct{} // closed by reap: read the rest and stop
	readDone  chan struct{} // closed when streamLogs has copied all it will
	hbStop    chan struct{}
	hbDone    chan struct{}
}

func (r *Runner) newAttempt(req activities.ContainerRequest) *attempt {
	key := activities.LogKey{RunID: req.RunID, Step: req.Step, Item: -1, Attempt: req.Attempt}
	stepDir := req.Step
	if req.Item != nil {
		key.Item = *req.Item
		stepDir += "-" + strconv.Itoa(*req.Item)
	}
	attemptDir := filepath.Join(r.dataDir, "runs", req.RunID, stepDir, "attempt-"+strconv.Itoa(req.Attempt))
	outDir := filepath.Join(attemptDir, "out")
	return &attempt{
		r:   r,
		req: req,
		key: key,
		logger: r.logger.With(zap.String("run", req.RunID), zap.String("step", req.Step),
			zap.Int("item", key.Item), zap.Int("attempt", req.Attempt)),
		stepDir:     stepDir,
		attemptDir:  attemptDir,
		outDir:      outDir,
		outputsPath: filepath.Join(outDir, "outputs.json"),
	}
}

// killLeftovers kills the process group an earlier execution of this
// activity left running when it cannot be adopted (see findPrevious), and
// numbers this execution after it.
func (a *attempt) killLeftovers() {
	if !a.restarted {
		return
	}
	prev := a.prev
	if st := a.started; st != nil {
		prev.Execution = max(prev.Execution, st.Execution)
		if prev.Pgid <= 1 || prev.BootID != st.BootID {
			// Lost before its first heartbeat: started.json names it.
			host, _ := os.Hostname()
			prev.Pgid, prev.Pid, prev.Host, prev.BootID = st.Pid, st.Pid, host, st.BootID
		}
	}
	a.execution = max(prev.Execution, 1) + 1
	a.r.killPrevious(prev, markerEnv(a.req), a.logger)
}

// prepareDirs creates the attempt's directories and clears what a previous
// execution left in them.
func (a *attempt) prepareDirs() error {
	// Every directory above a step's own is traversable but not listable
	// (0711): a step finds its work and outputs directories but cannot list
	// other runs' directories. The log stays the worker's (0600).
	if err := mkdirChain(a.r.dataDir, "runs", a.req.RunID, a.stepDir, "attempt-"+strconv.Itoa(a.req.Attempt)); err != nil {
		return err
	}
	if err := os.MkdirAll(a.outDir, 0o700); err != nil {
		return fmt.Errorf("create outputs dir: %w", err)
	}
	if err := a.r.giveTo(a.outDir); err != nil {
		return err
	}
	if err := a.prepareWorkDir(); err != nil {
		return err
	}
	for _, p := range []string{a.outputsPath, metricsPath(a.outputsPath)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove stale outputs: %w", err)
		}
	}
	if err := supervisor.Clear(a.attemptDir); err != nil {
		return fmt.Errorf("clear the records of an earlier execution: %w", err)
	}
	if err := os.Remove(a.checkpointPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("clear the records of an earlier execution: %w", err)
	}
	return nil
}

// prepareWorkDir checks the request's working directory, or makes a fresh
// one in the attempt directory when it has none.
func (a *attempt) prepareWorkDir() error {
	a.workDir = a.req.WorkingDir
	if a.workDir != "" {
		if fi, err := os.Stat(a.workDir); err != nil || !fi.IsDir() {
			return invalid(
				"working directory %q does not exist on the worker's machine: the local runtime runs steps as local processes, so it must exist there (or leave workingDir unset for a fresh directory)",
				a.workDir)
		}
	} else {
		a.workDir = filepath.Join(a.attemptDir, "work")
		// Fresh even when a restarted attempt reuses the directory: a
		// half-done previous run must not leave files the step trips on.
		if err := os.RemoveAll(a.workDir); err != nil {
			return fmt.Errorf("clear work dir: %w", err)
		}
	}
	if err := os.MkdirAll(a.workDir, 0o700); err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	if a.req.WorkingDir == "" {
		return a.r.giveTo(a.workDir)
	}
	return nil
}

// waitForGPUs waits for the GPUs the step asks for (see Runner.acquireGPUs).
// The caller defers the release it returns.
func (a *attempt) waitForGPUs(ctx context.Context) (release func(), err error) {
	a.gpuWaitStart = time.Now()
	a.devices, release, err = a.r.acquireGPUs(ctx, a.req, a.logger)
	return release, err
}

// setRunTime sets how long the step may run once it has its GPUs.
func (a *attempt) setRunTime() error {
	// The step's timeout covers its wait for GPUs too, as a Job's
	// activeDeadlineSeconds covers its pending time: the activity's own
	// backstop (timeout + 1 min) must not cut a step that waited.
	a.runFor = a.req.Timeout
	if waited := time.Since(a.gpuWaitStart); a.req.Timeout > 0 && a.req.GPU > 0 {
		a.runFor -= waited
		if a.runFor <= 0 {
			return temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("step timed out after %s waiting for local GPUs", a.req.Timeout),
				activities.ErrTypeStepTimeout, nil)
		}
	}
	return nil
}

// prepareCommand builds the step's environment and finds its program on the
// step's PATH.
func (a *attempt) prepareCommand() error {
	a.env = buildEnv(a.req, a.outputsPath)
	// A step can tell a re-run after a lost worker from its first run.
	a.env = setEnv(a.env, "ATELIER_EXECUTION", strconv.Itoa(a.execution))
	for _, kv := range a.secretEnv {
		k, v, _ := strings.Cut(kv, "=")
		a.env = setEnv(a.env, k, v)
	}
	if len(a.secretFiles) > 0 {
		if err := a.writeSecretFiles(); err != nil {
			return err
		}
		a.env = setEnv(a.env, "ATELIER_SECRETS", a.secretsDir())
	}
	if a.r.gpus != nil && len(a.r.gpus.gpus) > 0 || a.req.GPU > 0 {
		// Like a pod without a GPU request: CUDA sees only what was asked.
		a.env = setEnv(a.env, "CUDA_VISIBLE_DEVICES", visibleDevices(a.devices))
	}
	if a.r.stepUser != nil {
		// The worker's HOME belongs to the worker's user.
		a.env = setEnv(a.env, "HOME", a.workDir)
	}
	prog, err := lookPath(a.req.Command[0], envValue(a.env, "PATH"), a.workDir)
	if err != nil {
		msg := fmt.Sprintf("%s: the local runtime runs steps as local processes, so %q must be installed on the worker's machine",
			err, a.req.Command[0])
		if a.req.Image != "" {
			msg += fmt.Sprintf(" (image %q is not used locally)", a.req.Image)
		}
		return temporal.NewNonRetryableApplicationError(msg, activities.ErrTypeInvalidStep, nil)
	}
	a.prog = prog
	return nil
}

// openLog opens the step's log stream, continuing the one an earlier
// execution shipped when the worker restarted.
func (a *attempt) openLog(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err // cancelled while cleaning up
	}
	logs, err := openLogStream(ctx, a.r, a.key, filepath.Join(a.attemptDir, "log"), a.restarted, a.prev.LogOffset, a.logger)
	if err != nil {
		return err
	}
	a.logs = logs
	switch {
	case a.adopted:
		a.logs.primeTail()
	case a.restarted && a.rerunWhy != "":
		a.logs.note("worker restarted; re-running step (execution %d: %s)", a.execution, a.rerunWhy)
	case a.restarted:
		a.logs.note("worker restarted; re-running step (execution %d: the worker running it was lost)", a.execution)
	}
	return nil
}

// start starts the step's process under a supervisor (package
// supervisor), leading a process group of its own, with its stdout and
// stderr on the attempt's output file. On failure it closes the log.
func (a *attempt) start() error {
	// The supervisor writes the file; the worker reads it (streamLogs).
	outPath := supervisor.OutputPath(a.attemptDir)
	if err := os.WriteFile(outPath, nil, 0o600); err != nil {
		a.logs.Close()
		return fmt.Errorf("create the step's output file: %w", err)
	}
	follow, err := os.Open(outPath)
	if err != nil {
		a.logs.Close()
		return fmt.Errorf("open the step's output file: %w", err)
	}
	env := a.env
	if envValue(env, "PWD") == "" {
		// As os/exec sets it, and steps ran under os/exec before.
		env = append(slices.Clone(env), "PWD="+a.workDir)
	}
	spec := supervisor.Spec{
		Path:    a.prog,
		Args:    append(slices.Clone(a.req.Command), a.req.Args...),
		Env:     env,
		Dir:     a.workDir,
		Request: requestDigest(a.req), Execution: a.execution,
		OrphanAfter: a.r.orphanAfter, Grace: a.r.grace,
	}
	if a.req.GPU > 0 {
		// Its devices are this worker's bookkeeping: a step that outlived
		// the worker would hold GPUs the next worker thinks free.
		spec.OrphanAfter = 0
	}
	if u := a.r.stepUser; u != nil {
		spec.Credential = &supervisor.Credential{UID: u.UID, GID: u.GID}
	}
	if spec.OrphanAfter > 0 {
		if err := supervisor.Renew(a.attemptDir); err != nil {
			a.logger.Warn("cannot create the step's lease", zap.Error(err))
		}
	}
	a.startedAt = a.r.now()
	proc, err := a.r.supervisors.Start(a.attemptDir, spec)
	if err != nil {
		follow.Close()
		a.logs.note("cannot start %s: %v", a.req.Command[0], err)
		a.logs.Close()
		if isStartProblem(err) {
			return invalid("cannot start %q: %v", a.req.Command[0], err)
		}
		return fmt.Errorf("start %q: %w", a.req.Command[0], err)
	}
	if a.r.realClock {
		a.startedAt = proc.StartedAt // when the process really started
	}
	a.watch(proc, follow)
	a.logger.Info("step started", zap.Int("pid", a.pid), zap.String("program", a.prog), zap.String("dir", a.workDir))
	return nil
}

// watch makes proc the attempt's process: a.waited gets its end, and
// streamLogs follows output.
func (a *attempt) watch(proc *supervisor.Process, output *os.File) {
	a.proc, a.output = proc, output
	a.pid = proc.Pid
	a.pgid = proc.Pid // it leads its own group
	waited := make(chan waitResult, 1)
	a.waited = waited
	go func() {
		<-proc.Done()
		ex, err := proc.Result()
		waited <- waitResult{exit: ex, err: err}
	}()
}

// runToEnd watches the running step (its log from offset from of its
// output, heartbeats) until it ends or is stopped, and returns its outcome,
// recorded (see RunContainer).
func (a *attempt) runToEnd(ctx context.Context, from int64) (activities.ContainerResult, error) {
	a.streamLogs(from)
	a.startHeartbeat(ctx)
	reason, res := a.wait(ctx)
	a.reap(reason)
	result, err := a.outcome(ctx, reason, res)
	a.record(result, err)
	a.dropOutput()
	return result, err
}

// streamLogs follows the step's output file into its log from offset from
// until reap has seen the process end and read what is left.
func (a *attempt) streamLogs(from int64) {
	done, stop := make(chan struct{}), make(chan struct{})
	a.readDone, a.readStop = done, stop
	go func() {
		defer close(done)
		defer a.output.Close()
		a.follow(from, stop)
	}()
}

// startHeartbeat heartbeats the process and log offset (Heartbeat), and
// renews the supervisor's lease, now and every heartbeat interval until
// reap stops it.
func (a *attempt) startHeartbeat(ctx context.Context) {
	stop, done := make(chan struct{}), make(chan struct{})
	a.hbStop, a.hbDone = stop, done
	go func() {
		defer close(done)
		hb := a.processHeartbeat()
		t := time.NewTicker(a.r.heartbeat)
		defer t.Stop()
		for {
			hb.LogOffset = a.logs.Shipped()
			activity.RecordHeartbeat(ctx, hb)
			if !a.proc.Attached {
				if err := supervisor.Renew(a.attemptDir); err != nil {
					a.logger.Warn("cannot renew the step's lease", zap.Error(err))
				}
			}
			select {
			case <-t.C:
			case <-stop:
				return
			}
		}
	}()
}

// processHeartbeat is the heartbeat of the attempt's process.
func (a *attempt) processHeartbeat() Heartbeat {
	host, _ := os.Hostname()
	return Heartbeat{Pgid: a.pgid, Pid: a.pid, Supervisor: a.proc.Supervisor, StartedAt: a.startedAt, Host: host, BootID: supervisor.BootID(),
		Execution: a.execution, LogOffset: a.logs.Shipped()}
}

// wait waits for the process to exit, or stops its group when the activity
// is cancelled or the step's time is up.
func (a *attempt) wait(ctx context.Context) (stopReason, waitResult) {
	select {
	case res := <-a.waited: // an adopted step may have ended long ago
		return exited, res
	default:
	}
	var timeout <-chan time.Time
	if a.req.Timeout > 0 {
		t := time.NewTimer(a.runFor)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case res := <-a.waited:
		return exited, res
	case <-ctx.Done():
		if a.stale(ctx) {
			a.logger.Info("this execution lost Temporal; leaving the step to the execution that adopts it",
				zap.NamedError("cause", context.Cause(ctx)))
			return detached, waitResult{}
		}
		a.logs.note("step cancelled; stopping it")
		return cancelled, terminate(a.pgid, a.waited, a.r.grace, a.logs.note, a.logger)
	case <-timeout:
		a.logs.note("step timed out after %s; stopping it", a.req.Timeout)
		return timedOut, terminate(a.pgid, a.waited, a.r.grace, a.logs.note, a.logger)
	}
}

// stale tells a context cancelled because this execution lost Temporal
// (its heartbeats failed for the heartbeat timeout, say while the server
// was down, or Temporal answered that it gave the execution up and
// delivered the activity again) from a cancellation the run asked for
// (a *temporal.CanceledError) or a stopping worker (context.Canceled).
// In the first case the step belongs to whichever execution adopts it, and
// its supervisor keeps it running meanwhile.
func (a *attempt) stale(ctx context.Context) bool {
	cause := context.Cause(ctx)
	var asked *temporal.CanceledError
	return !a.proc.Attached && !errors.As(cause, &asked) && !errors.Is(cause, context.Canceled)
}

// reap kills what is left of the step's group once its process exited,
// reads the rest of its output and stops the heartbeat. A detached
// execution leaves the group alone.
func (a *attempt) reap(reason stopReason) {
	// Like a pod whose container exited: nothing the step started outlives
	// it. (The supervisor did so too; this covers a lost supervisor.)
	if reason != detached {
		if err := signalGroup(a.pgid, syscall.SIGKILL); err != nil {
			a.logger.Warn("cannot kill leftover processes", zap.Int("pgid", a.pgid), zap.Error(err))
		}
	}
	close(a.readStop)
	<-a.readDone
	close(a.hbStop)
	<-a.hbDone
}

// outcome turns how the step ended into the activity's result and error
// (see RunContainer), reading its outputs when it succeeded. It closes the
// log.
func (a *attempt) outcome(ctx context.Context, reason stopReason, res waitResult) (activities.ContainerResult, error) {
	if reason == detached {
		a.left = true
		a.logs.Close()
		return activities.ContainerResult{}, ctx.Err()
	}
	result, signal := a.result(res)
	switch {
	case reason == cancelled:
		a.logs.Close()
		return result, ctx.Err()
	case reason == timedOut:
		a.logs.Close()
		return result, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("step timed out after %s and was killed", a.req.Timeout),
			activities.ErrTypeStepTimeout, nil, result)
	case res.err != nil:
		a.logs.note("%v", res.err)
		a.logs.Close()
		// Retryable: the next execution re-runs the step, visibly.
		return result, fmt.Errorf("wait for the step's process: %w", res.err)
	case result.ExitCode != 0:
		a.logs.Close()
		return result, temporal.NewNonRetryableApplicationError(
			failureMessage(result.ExitCode, signal, a.logs.LastLines(5)),
			activities.ErrTypeStepFailed, nil, result)
	}
	return a.outputs(ctx, result)
}

// result is the step's result without outputs, and the signal that killed
// it, if one did.
func (a *attempt) result(res waitResult) (activities.ContainerResult, string) {
	finishedAt := a.r.now()
	if res.err == nil && (a.adopted || a.r.realClock) && !res.exit.FinishedAt.IsZero() && res.exit.FinishedAt.Before(finishedAt) {
		// When the supervisor reaped it (maybe while no worker watched).
		finishedAt = res.exit.FinishedAt
	}
	result := activities.ContainerResult{ExitCode: -1, StartedAt: a.startedAt, FinishedAt: finishedAt, Execution: a.execution}
	var signal string
	if res.err == nil {
		result.ExitCode, signal = res.exit.ExitCode, res.exit.Signal
	}
	a.logger.Info("step finished", zap.Int("exitCode", result.ExitCode), zap.Duration("took", finishedAt.Sub(a.startedAt)))
	return result, signal
}

// outputs adds the outputs a succeeded step wrote to its result, and closes
// the log.
func (a *attempt) outputs(ctx context.Context, result activities.ContainerResult) (activities.ContainerResult, error) {
	outputs, err := readOutputs(a.outputsPath)
	if err == nil {
		result.Metrics, err = readMetrics(metricsPath(a.outputsPath))
	}
	if err != nil {
		// A metrics file's problems name its keys, which may hold a
		// secret's value, like any string the step wrote.
		msg := a.redact.String(err.Error())
		a.logs.note("%s", msg)
		a.logs.Close()
		result.Metrics = nil
		return result, temporal.NewNonRetryableApplicationError(msg, activities.ErrTypeBadOutputs, nil, result)
	}
	if err := a.storeOutputs(ctx, &result); err != nil {
		a.logs.note("%v", err)
		a.logs.Close()
		return result, err
	}
	a.logs.Close()
	result.Outputs = a.redact.Outputs(outputs)
	result.Metrics = a.redact.Metrics(result.Metrics)
	return result, nil
}
