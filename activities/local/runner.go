package local

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/local/supervisor"
	"github.com/atelier-ml/atelier/runstate"
)

// Defaults of the options.
const (
	DefaultHeartbeatInterval = time.Second
	DefaultGracePeriod       = 5 * time.Second
	// DefaultLogLimit bounds what one attempt ships to the LogSink, so a step
	// stuck in a print loop cannot fill the database.
	DefaultLogLimit = 8 << 20
)

// inheritedEnv is all a step gets from the worker's environment (see the
// package doc for why not more).
var inheritedEnv = []string{"PATH", "HOME", "LANG", "TMPDIR"}

// Runner runs container steps as local processes. It is safe for concurrent
// use: one Runner serves every activity of a worker.
type Runner struct {
	logs      LogSink
	dataDir   string
	now       func() time.Time
	logger    *zap.Logger
	heartbeat time.Duration
	grace     time.Duration
	logLimit  int64
	stepUser  *StepUser      // nil: steps run as the worker's user
	gpus      *GPUSet        // nil: the machine's GPUs are unknown (none for steps)
	secrets   SecretResolver // nil: steps cannot reference secrets
	artifacts ArtifactStore  // nil: steps cannot declare artifacts
	// artifactLimit caps each project's artifact bytes (0: no cap).
	artifactLimit int64
	artifactUsage ArtifactUsage
	progress      func(context.Context, activities.StepProgress) error
	orphanAfter   time.Duration // see WithOrphanTimeout
	supervisors   supervisor.Pool
	realClock     bool // now is time.Now, the supervisors' clock

	// Fixed in production; variables so tests need not wait on them.
	flushInterval time.Duration
	chunkSize     int
	drainTimeout  time.Duration // how long to wait for pipe EOF after the group is dead
	flushDeadline time.Duration // how long the final log flush may retry
}

// Option configures a Runner.
type Option func(*Runner)

// WithDataDir sets where attempt directories (work dir, log, outputs) live.
// The default is $XDG_STATE_HOME/atelier, or .atelier/data under the
// worker's working directory when XDG_STATE_HOME is unset.
func WithDataDir(dir string) Option { return func(r *Runner) { r.dataDir = dir } }

// WithClock sets the clock for the StartedAt/FinishedAt timestamps that end
// up in run status. Timeouts and heartbeats use real time regardless: a fake
// clock must not be able to stall a process kill.
func WithClock(now func() time.Time) Option {
	return func(r *Runner) { r.now, r.realClock = now, false }
}

// WithLogger sets the worker-side logger (not the step log).
func WithLogger(l *zap.Logger) Option { return func(r *Runner) { r.logger = l } }

// WithHeartbeatInterval sets how often a running step heartbeats. It must be
// well below the activity's HeartbeatTimeout, which is what detects a dead
// worker.
func WithHeartbeatInterval(d time.Duration) Option { return func(r *Runner) { r.heartbeat = d } }

// WithGracePeriod sets how long a cancelled or timed-out step has between
// SIGTERM and SIGKILL, like a pod's terminationGracePeriodSeconds.
func WithGracePeriod(d time.Duration) Option { return func(r *Runner) { r.grace = d } }

// WithLogLimit sets how many bytes of output one attempt may ship before the
// log is truncated.
func WithLogLimit(n int64) Option { return func(r *Runner) { r.logLimit = n } }

// WithGPUs gives the runner the machine's GPUs (DetectGPUs, SelectGPUs):
// a step that asks for GPUs waits for free devices and sees only those
// (CUDA_VISIBLE_DEVICES); other steps see none.
func WithGPUs(s *GPUSet) Option { return func(r *Runner) { r.gpus = s } }

// WithProgressReporter replaces how a waiting step tells its run why it
// waits (default activities.SignalRun). Tests use it to observe them.
func WithProgressReporter(f func(context.Context, activities.StepProgress) error) Option {
	return func(r *Runner) { r.progress = f }
}

// New returns a Runner that ships step logs to logs, which must not be nil.
func New(logs LogSink, opts ...Option) *Runner {
	if logs == nil {
		panic("local.New: nil LogSink")
	}
	r := &Runner{
		logs:          logs,
		now:           time.Now,
		logger:        zap.NewNop(),
		heartbeat:     DefaultHeartbeatInterval,
		grace:         DefaultGracePeriod,
		logLimit:      DefaultLogLimit,
		progress:      activities.SignalRun,
		orphanAfter:   DefaultOrphanTimeout,
		realClock:     true,
		flushInterval: 500 * time.Millisecond,
		chunkSize:     64 << 10,
		drainTimeout:  2 * time.Second,
		flushDeadline: 15 * time.Second,
	}
	for _, o := range opts {
		o(r)
	}
	if r.dataDir == "" {
		if x := os.Getenv("XDG_STATE_HOME"); x != "" {
			r.dataDir = filepath.Join(x, "atelier")
		} else {
			r.dataDir = filepath.Join(".atelier", "data")
		}
	}
	// Steps run in other directories: a relative data dir would make
	// ATELIER_OUTPUTS point nowhere.
	if abs, err := filepath.Abs(r.dataDir); err == nil {
		r.dataDir = abs
	}
	if r.heartbeat <= 0 {
		r.heartbeat = DefaultHeartbeatInterval
	}
	if r.grace < 0 {
		r.grace = 0
	}
	if r.logLimit <= 0 {
		r.logLimit = DefaultLogLimit
	}
	return r
}

// Register registers RunContainer under its contract name, which workflow
// histories refer to.
func (r *Runner) Register(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(r.RunContainer, activity.RegisterOptions{Name: activities.RunContainerName})
}

// Heartbeat is the activity heartbeat detail of a running step. A Temporal
// retry of the same activity (the worker died) reads it to continue the
// step's log, and to kill what the previous execution left running when
// it cannot adopt it.
type Heartbeat struct {
	Pgid int `json:"pgid"`
	Pid  int `json:"pid"`
	// Supervisor is the process that supervises the step (0 before them).
	Supervisor int       `json:"supervisor,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	LogOffset  int64     `json:"logOffset"` // bytes the LogSink has confirmed
	Host       string    `json:"host,omitempty"`
	BootID     string    `json:"bootId,omitempty"`
	// Execution counts the executions of this attempt: 1, then one more
	// each time the worker running it was lost (ATELIER_EXECUTION).
	Execution int `json:"execution,omitempty"`
}

// waitResult is how the step's process ended, or why that is unknown.
type waitResult struct {
	exit supervisor.Exited
	err  error
}

// waitResultOf is the end of a process the worker waited for itself.
func waitResultOf(ps *os.ProcessState, err error) waitResult {
	if ps == nil {
		return waitResult{err: err}
	}
	code, signal := exitStatus(ps)
	return waitResult{exit: supervisor.Exited{ExitCode: code, Signal: signal, FinishedAt: time.Now()}}
}

// RunContainer runs one attempt of a container step and waits for it.
//
// Failures of the step itself are non-retryable application errors
// (activities.ErrType*) carrying the ContainerResult as details, because the
// pipeline workflow owns step retries. Failures of the worker's machinery
// (cannot create directories, fork fails) are plain, retryable errors. On
// cancellation it returns ctx.Err() once the process group is dead.
func (r *Runner) RunContainer(ctx context.Context, req activities.ContainerRequest) (activities.ContainerResult, error) {
	if err := validate(req); err != nil {
		return activities.ContainerResult{}, invalid("%s", err)
	}
	a := r.newAttempt(req)
	if res, err, ok := a.recordedOutcome(); ok {
		a.logger.Info("the step ended before its result was reported; returning the recorded result, not running it again")
		return res, err
	}
	if a.findPrevious(ctx) {
		return a.adopt(ctx)
	}
	a.killLeftovers()
	if err := a.prepareDirs(); err != nil {
		return activities.ContainerResult{}, err
	}
	release, err := a.waitForGPUs(ctx)
	if err != nil {
		return activities.ContainerResult{}, err
	}
	defer release()
	if err := a.setRunTime(); err != nil {
		return activities.ContainerResult{ExitCode: -1}, err
	}
	if err := a.resolveSecrets(ctx); err != nil {
		return activities.ContainerResult{}, err
	}
	if err := a.placeInputs(ctx); err != nil {
		return activities.ContainerResult{}, err
	}
	defer a.dropSecretFiles() // written by prepareCommand, gone once the process is
	if err := a.prepareCommand(); err != nil {
		return activities.ContainerResult{}, err
	}
	if err := a.openLog(ctx); err != nil {
		return activities.ContainerResult{}, err
	}
	if err := a.start(); err != nil {
		return activities.ContainerResult{}, err
	}
	return a.runToEnd(ctx, 0)
}

// acquireGPUs waits for the devices req asks for, heartbeating (with no
// process yet) and telling the run why it waits. A request the machine can
// never satisfy fails the step (non-retryable InvalidStep).
func (r *Runner) acquireGPUs(ctx context.Context, req activities.ContainerRequest, logger *zap.Logger) ([]GPU, func(), error) {
	if req.GPU <= 0 {
		return nil, func() {}, nil
	}
	holder := req.RunID + "/" + req.Step
	if req.Item != nil {
		holder += "/" + strconv.Itoa(*req.Item)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(r.heartbeat)
		defer t.Stop()
		for {
			if activity.IsActivity(ctx) {
				activity.RecordHeartbeat(ctx, Heartbeat{})
			}
			select {
			case <-t.C:
			case <-stop:
				return
			}
		}
	}()
	waited := false
	report := func(msg string) {
		if r.progress == nil {
			return
		}
		if err := r.progress(ctx, activities.StepProgress{Step: req.Step, Item: req.Item, Attempt: req.Attempt, Message: msg}); err != nil {
			logger.Warn("cannot report why the step waits", zap.String("message", msg), zap.Error(err))
		}
	}
	wctx := ctx
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	gpus, release, err := r.gpus.Acquire(wctx, GPURequest{Count: req.GPU, Product: req.GPUType, Holder: holder}, func(why string) {
		waited = true
		logger.Info("step waits for local GPUs", zap.String("why", why))
		report(why)
	})
	var unsat *UnsatisfiableGPUError
	switch {
	case errors.As(err, &unsat):
		return nil, nil, invalid("%s", unsat)
	case err != nil && ctx.Err() == nil:
		return nil, nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("step timed out after %s waiting for local GPUs", req.Timeout), activities.ErrTypeStepTimeout, nil)
	case err != nil:
		return nil, nil, err
	}
	if waited {
		report("")
	}
	logger.Info("local GPUs assigned", zap.String("devices", visibleDevices(gpus)))
	return gpus, release, nil
}

// terminate stops the group the way Kubernetes stops a pod: SIGTERM, then
// SIGKILL once the grace period is over; note writes to the process's log.
func terminate(pgid int, waited <-chan waitResult, grace time.Duration, note func(format string, args ...any), logger *zap.Logger) waitResult {
	if err := signalGroup(pgid, syscall.SIGTERM); err != nil {
		logger.Warn("cannot send SIGTERM", zap.Int("pgid", pgid), zap.Error(err))
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case res := <-waited:
		return res
	case <-timer.C:
	}
	note("still running %s after SIGTERM; sending SIGKILL", grace)
	if err := signalGroup(pgid, syscall.SIGKILL); err != nil {
		logger.Warn("cannot send SIGKILL", zap.Int("pgid", pgid), zap.Error(err))
	}
	return <-waited
}

// previousHeartbeat returns the details of an earlier execution of this
// activity. Their mere presence means the worker died mid-step: the step
// heartbeats only once its process runs, and every outcome after that is
// final (non-retryable or cancelled).
func previousHeartbeat(ctx context.Context, logger *zap.Logger) (Heartbeat, bool) {
	if !activity.HasHeartbeatDetails(ctx) {
		return Heartbeat{}, false
	}
	var hb Heartbeat
	if err := activity.GetHeartbeatDetails(ctx, &hb); err != nil {
		logger.Warn("cannot decode previous heartbeat; not cleaning up", zap.Error(err))
		return Heartbeat{}, true
	}
	return hb, true
}

// killPrevious kills the process group a dead worker left running, so the
// re-run does not race its predecessor on the same files. It only kills a
// group it can show is still this step's (see groupState).
func (r *Runner) killPrevious(hb Heartbeat, marker []string, logger *zap.Logger) {
	if hb.Pgid <= 1 {
		return
	}
	host, _ := os.Hostname()
	if hb.Host != host || hb.BootID != supervisor.BootID() {
		logger.Info("previous attempt ran on another machine or boot; nothing to clean up",
			zap.String("host", hb.Host), zap.Int("pgid", hb.Pgid))
		return
	}
	alive, owned := groupState(hb.Pgid, marker)
	if !alive {
		return
	}
	if !owned {
		logger.Warn("previous attempt's process group id now belongs to other processes; not killing it",
			zap.Int("pgid", hb.Pgid))
		return
	}
	logger.Warn("killing process group left by a previous attempt", zap.Int("pgid", hb.Pgid))
	if err := signalGroup(hb.Pgid, syscall.SIGKILL); err != nil {
		logger.Error("cannot kill previous attempt's process group", zap.Int("pgid", hb.Pgid), zap.Error(err))
		return
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if alive, _ := groupState(hb.Pgid, marker); !alive {
			return
		}
	}
	logger.Error("previous attempt's process group survived SIGKILL", zap.Int("pgid", hb.Pgid))
}

// validate rejects requests that cannot run, before anything touches disk.
func validate(req activities.ContainerRequest) error {
	if !platformSupported {
		return errUnsupportedPlatform
	}
	if len(req.Command) == 0 || req.Command[0] == "" {
		return errors.New("step has no command")
	}
	for _, c := range []struct{ what, v string }{{"run id", req.RunID}, {"step name", req.Step}} {
		if c.v == "" || c.v == "." || c.v == ".." || strings.ContainsAny(c.v, "/\\\x00") {
			return fmt.Errorf("%s %q cannot name a directory", c.what, c.v)
		}
	}
	if req.Attempt < 1 {
		return fmt.Errorf("attempt must be 1 or more, got %d", req.Attempt)
	}
	if req.Item != nil && *req.Item < 0 {
		return fmt.Errorf("item index must not be negative, got %d", *req.Item)
	}
	if req.Timeout < 0 {
		return fmt.Errorf("timeout must not be negative, got %s", req.Timeout)
	}
	for i, a := range append(slices.Clone(req.Command), req.Args...) {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("command/args element %d contains a NUL byte", i)
		}
	}
	if strings.ContainsRune(req.WorkingDir, 0) {
		return errors.New("workingDir contains a NUL byte")
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("invalid env variable name %q", k)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("env variable %s contains a NUL byte", k)
		}
	}
	return nil
}

var errUnsupportedPlatform = fmt.Errorf("the local runtime needs a Unix system, not %s", runtime.GOOS)

func invalid(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), activities.ErrTypeInvalidStep, nil)
}

// markerEnv is the part of the step environment that identifies this
// attempt's processes on the machine (see groupState).
func markerEnv(req activities.ContainerRequest) []string {
	m := []string{
		"ATELIER_RUN_ID=" + req.RunID,
		"ATELIER_STEP=" + req.Step,
		"ATELIER_ATTEMPT=" + strconv.Itoa(req.Attempt),
	}
	if req.Item != nil {
		m = append(m, "ATELIER_ITEM="+strconv.Itoa(*req.Item))
	}
	return m
}

// buildEnv layers the inherited allowlist, the step's env and the runtime's
// variables, later layers winning, so a step cannot spoof its identity.
func buildEnv(req activities.ContainerRequest, outputsPath string) []string {
	m := make(map[string]string)
	for _, k := range inheritedEnv {
		if v, ok := os.LookupEnv(k); ok {
			m[k] = v
		}
	}
	maps.Copy(m, req.Env)
	for _, kv := range markerEnv(req) {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	m["ATELIER_PROJECT"] = req.Project
	m["ATELIER_OUTPUTS"] = outputsPath
	m[runstate.MetricsEnv] = metricsPath(outputsPath)
	if len(req.Inputs) > 0 || len(req.Outputs) > 0 {
		attemptDir := filepath.Dir(filepath.Dir(outputsPath))
		m["ATELIER_INPUTS"] = filepath.Join(attemptDir, "inputs")
		m["ATELIER_ARTIFACTS"] = filepath.Join(attemptDir, "artifacts")
	}
	env := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		env = append(env, k+"="+m[k])
	}
	return env
}

// metricsPath is where a step writes its metrics: next to its outputs.
func metricsPath(outputsPath string) string {
	return filepath.Join(filepath.Dir(outputsPath), "metrics.json")
}

// setEnv replaces (or adds) key in a sorted-or-not KEY=VALUE list.
func setEnv(env []string, key, value string) []string {
	for i, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			env[i] = key + "=" + value
			return env
		}
	}
	return append(env, key+"="+value)
}

// mkdirChain creates base/parts... with 0711 directories below base (and
// base itself if missing), fixing the mode of ones that exist.
func mkdirChain(base string, parts ...string) error {
	dir := base
	for i := -1; i < len(parts); i++ {
		if i >= 0 {
			dir = filepath.Join(dir, parts[i])
		}
		if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			if i == -1 && errors.Is(err, os.ErrNotExist) {
				if err := os.MkdirAll(dir, 0o711); err != nil {
					return fmt.Errorf("create data dir: %w", err)
				}
				continue
			}
			return fmt.Errorf("create attempt dir: %w", err)
		}
		if i >= 0 {
			if err := os.Chmod(dir, 0o711); err != nil {
				return fmt.Errorf("create attempt dir: %w", err)
			}
		}
	}
	return nil
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v
		}
	}
	return ""
}

// lookPath resolves a program the way exec.LookPath does, but against the
// step's PATH (its env may set one) rather than the worker's. Like
// exec.LookPath it ignores relative PATH entries, which would resolve
// against the step's working directory.
func lookPath(file, path, dir string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("program %q %v", file, err)
		}
		return file, nil // exec resolves a relative path against Dir
	}
	var found string
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, file)
		err := executable(p)
		if err == nil {
			return p, nil
		}
		if found == "" && !errors.Is(err, os.ErrNotExist) {
			found = p
		}
	}
	if found != "" {
		return "", fmt.Errorf("program %q found at %s but it is not executable", file, found)
	}
	return "", fmt.Errorf("program %q not found in PATH %q", file, path)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("does not exist: %w", os.ErrNotExist)
		}
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return errors.New("is not an executable file")
	}
	return nil
}

// failureMessage keeps the error short (it is stored in workflow history
// and shown in run status) yet enough to see why without opening the log.
func failureMessage(code int, signal string, lines []string) string {
	head := fmt.Sprintf("command exited with code %d", code)
	if signal != "" {
		head = fmt.Sprintf("command was killed by signal %q (exit code %d)", signal, code)
	}
	const maxLen = 1024
	for i := range lines {
		lines[i] = strings.ToValidUTF8(lines[i], "?")
	}
	for len(lines) > 0 {
		msg := head + runstate.OutputTail + strings.Join(lines, "\n")
		if len(msg) <= maxLen {
			return msg
		}
		if len(lines) == 1 {
			// One huge line: keep its end, which is usually the error.
			room := maxLen - len(head) - len(runstate.OutputTail+"…")
			l := lines[0]
			cut := len(l) - room
			for cut < len(l) && !utf8RuneStart(l[cut]) {
				cut++
			}
			return head + runstate.OutputTail + "…" + l[cut:]
		}
		lines = lines[1:]
	}
	return head
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
