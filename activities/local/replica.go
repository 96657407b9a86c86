package local

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/platform/redact"
)

// replica is one replica of a revision: a supervisor goroutine that keeps
// one engine process running, as a kubelet keeps a pod's container
// running. When the process exits it is started again after a back-off
// that doubles with each recent exit, so a replica that keeps dying is
// reported crash-looping rather than silently gone. Fields under mu are
// what Observe reads.
type replica struct {
	name    string
	index   int // the number in its name, in creation order
	created time.Time
	logPath string
	launch  launch
	stop    context.CancelFunc
	done    chan struct{} // closed once no process of the replica is left

	mu sync.Mutex
	// gen counts process starts: a probe of an earlier process must not
	// mark the current one ready.
	gen   int
	pid   int // 0 while no process runs
	ports replicaPorts
	// scheduled is the first start (GPUs found); started the current or
	// last process's start; readySince when the current process first
	// passed its readiness check (zero while it does not).
	scheduled, started, readySince time.Time
	// exits are the process's recent exit times (crash-loop window).
	exits    []time.Time
	restarts int
	// lastExit is how the last process ended, with its last lines;
	// waiting why the replica cannot start (its GPUs are taken).
	lastExit, waiting string
	// redact hides the replica's secrets in lastExit; set before its
	// first process starts, by supervise only.
	redact *redact.Redactor
}

// launch is what a replica's processes run.
type launch struct {
	program string
	engine  engine
	project string
	spec    inference.EndpointSpec
	info    inference.BackendInfo
	env     []string
	dir     string // working directory
	logDir  string
	gpu     GPURequest
}

// replicaState is a consistent copy of what Observe needs.
type replicaState struct {
	name        string
	gen, pid    int
	ports       replicaPorts
	startup     inference.ReplicaStartup
	recentExits int
	lastExit    string
	waiting     string
}

func (rp *replica) state(now time.Time, window time.Duration) replicaState {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	rp.pruneExits(now, window)
	return replicaState{
		name: rp.name, gen: rp.gen, pid: rp.pid, ports: rp.ports,
		startup: inference.ReplicaStartup{Replica: rp.name, Created: rp.created,
			Scheduled: rp.scheduled, ImagePulled: rp.started, EngineReady: rp.readySince},
		recentExits: len(rp.exits), lastExit: rp.lastExit, waiting: rp.waiting,
	}
}

// pruneExits forgets exits older than the crash-loop window; mu is held.
func (rp *replica) pruneExits(now time.Time, window time.Duration) {
	i := 0
	for i < len(rp.exits) && now.Sub(rp.exits[i]) > window {
		i++
	}
	rp.exits = rp.exits[i:]
}

// setReady records a readiness check of process gen.
func (rp *replica) setReady(gen int, ready bool, at time.Time) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if gen != rp.gen || rp.pid == 0 {
		return // that process is gone
	}
	switch {
	case !ready:
		rp.readySince = time.Time{}
	case rp.readySince.IsZero():
		rp.readySince = at
	}
}

// ready reports whether the last check of the current process passed.
func (rp *replica) ready() bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.pid != 0 && !rp.readySince.IsZero()
}

func (rp *replica) setWaiting(why string) {
	rp.mu.Lock()
	rp.waiting = why
	rp.mu.Unlock()
}

// supervise runs the replica until ctx ends, then stops its process and
// gives its GPUs back.
func (s *Serving) supervise(ctx context.Context, rp *replica) {
	defer close(rp.done)
	// The process's parent-death signal fires when the thread that forked
	// it exits (see the package doc). This goroutine forks every process
	// of the replica and reaps it before forking the next, pinned to one
	// thread meanwhile. It must unlock before it returns: a goroutine that
	// ends locked makes Go retire its thread, which would SIGKILL any
	// Pdeathsig child other code once forked from that thread (the dev
	// Temporal server of `atelier dev`, say).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	logger := s.logger.With(zap.String("replica", rp.name))
	// What the engine needs besides its devices first, so that GPUs are
	// not held idle during a model's download.
	spec, secretEnv, ok := s.prepareReplica(ctx, rp, logger)
	if !ok {
		return
	}
	var gpus []GPU
	if rp.launch.gpu.Count > 0 {
		got, release, err := s.r.gpus.Acquire(ctx, rp.launch.gpu, rp.setWaiting)
		if err != nil {
			if ctx.Err() == nil { // ApplyEndpointLayout checked the machine has them
				rp.setWaiting(err.Error())
				<-ctx.Done()
			}
			return
		}
		defer release()
		gpus = got
		rp.setWaiting("")
	}
	env := rp.launch.env
	if s.r.gpus != nil && len(s.r.gpus.gpus) > 0 || rp.launch.gpu.Count > 0 {
		// As for steps: the engine sees exactly its devices, or none.
		env = setEnv(env, "CUDA_VISIBLE_DEVICES", visibleDevices(gpus))
	}
	env = append(slices.Clone(env), secretEnv...)
	for {
		s.runProcess(ctx, rp, spec, env, logger)
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.backoff(rp)):
		}
		rp.mu.Lock()
		rp.restarts++
		rp.mu.Unlock()
	}
}

// prepareReplica places the replica's registered model and opens its
// secrets (and its redactor), trying again while the store or the
// catalogue is down or a secret is missing, saying why the replica waits.
// ok is false once ctx ends.
func (s *Serving) prepareReplica(ctx context.Context, rp *replica, logger *zap.Logger) (spec inference.EndpointSpec, secretEnv []string, ok bool) {
	for {
		var err error
		spec, err = s.locateModel(ctx, rp.launch.project, rp.launch.spec, rp.setWaiting)
		if err == nil {
			if secretEnv, rp.redact, err = s.replicaSecrets(ctx, rp.launch.project, spec); err == nil {
				rp.setWaiting("")
				return spec, secretEnv, true
			}
		}
		if ctx.Err() != nil {
			return spec, nil, false
		}
		rp.setWaiting(err.Error())
		logger.Warn("cannot prepare the replica", zap.Error(err))
		select {
		case <-ctx.Done():
			return spec, nil, false
		case <-time.After(s.maxRestartBackoff):
		}
	}
}

// backoff is how long to wait before starting the replica again:
// restartBackoff doubled for each exit within the crash-loop window but
// the last, at most maxRestartBackoff.
func (s *Serving) backoff(rp *replica) time.Duration {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	d := s.restartBackoff
	for i := 1; i < len(rp.exits) && d < s.maxRestartBackoff; i++ {
		d *= 2
	}
	return min(d, s.maxRestartBackoff)
}

// runProcess runs one process of the replica until it exits or ctx ends
// (then it is stopped: SIGTERM, SIGKILL after the grace period), and
// records how it ended.
func (s *Serving) runProcess(ctx context.Context, rp *replica, spec inference.EndpointSpec, env []string, logger *zap.Logger) {
	l := rp.launch
	ports, err := portsFor(l.info)
	if err != nil {
		s.exited(rp, err.Error(), logger)
		return
	}
	args := engineArgs(l.engine, spec, ports)
	logFile, err := openReplicaLog(rp.logPath)
	if err != nil {
		s.exited(rp, err.Error(), logger)
		return
	}
	defer logFile.Close()
	note := func(format string, args ...any) {
		fmt.Fprintf(logFile, "[atelier] "+format+"\n", args...)
	}
	rp.mu.Lock()
	restarts := rp.restarts
	rp.mu.Unlock()
	note("%s starting replica %s (restarts: %d): %s %s", s.r.now().Format(time.RFC3339), rp.name, restarts, l.program, strings.Join(args, " "))
	var from int64 // where this process's output starts
	if fi, err := logFile.Stat(); err == nil {
		from = fi.Size()
	}
	cmd := &exec.Cmd{
		Path: l.program,
		Args: append([]string{l.program}, args...),
		Env:  env,
		Dir:  l.dir,
		// An *os.File: the child writes the log itself, no copying
		// goroutine, and the output survives the worker.
		Stdout:      logFile,
		Stderr:      logFile,
		SysProcAttr: sysProcAttr(),
	}
	if s.r.stepUser != nil {
		setCredential(cmd.SysProcAttr, s.r.stepUser)
	}
	if err := cmd.Start(); err != nil {
		note("cannot start %s: %v", l.program, err)
		s.exited(rp, fmt.Sprintf("cannot start %s: %v", l.program, err), logger)
		return
	}
	pgid := cmd.Process.Pid // Setpgid: the process leads a new group
	pidFile := strings.TrimSuffix(rp.logPath, ".log") + ".pid"
	if err := writePidFile(pidFile, pgid); err != nil {
		logger.Warn("cannot record the replica's process group; a worker crash may leave its children running", zap.Error(err))
	}
	defer os.Remove(pidFile) // once the group is dead
	now := s.r.now()
	rp.mu.Lock()
	rp.gen++
	rp.pid, rp.ports, rp.started, rp.readySince = cmd.Process.Pid, ports, now, time.Time{}
	if rp.scheduled.IsZero() {
		rp.scheduled = now
	}
	rp.mu.Unlock()
	logger.Info("replica started", zap.Int("pid", pgid), zap.Int("port", ports.http))

	waited := make(chan waitResult, 1)
	go func() {
		err := cmd.Wait()
		waited <- waitResultOf(cmd.ProcessState, err)
	}()
	var res waitResult
	select {
	case res = <-waited:
	case <-ctx.Done():
		note("replica stopped; sending SIGTERM")
		res = terminate(pgid, waited, s.r.grace, note, logger)
	}
	// As when a pod's container ends: nothing it started outlives it.
	if err := signalGroup(pgid, syscall.SIGKILL); err != nil {
		logger.Warn("cannot kill leftover processes", zap.Int("pgid", pgid), zap.Error(err))
	}
	rp.mu.Lock()
	rp.pid, rp.readySince = 0, time.Time{}
	rp.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	code, signal := -1, ""
	if res.err == nil {
		code, signal = res.exit.ExitCode, res.exit.Signal
	}
	// The last lines reach the endpoint's status (and Temporal history):
	// never a secret the engine printed.
	why := rp.redact.String(failureMessage(code, signal, lastLines(rp.logPath, from, 5)))
	note("the engine ended: exit code %d %s", code, signal)
	s.exited(rp, why, logger)
}

// exited records the end (or failed start) of a process of the replica.
func (s *Serving) exited(rp *replica, why string, logger *zap.Logger) {
	now := s.r.now()
	rp.mu.Lock()
	rp.exits = append(rp.exits, now)
	rp.pruneExits(now, s.crashLoopWindow)
	rp.lastExit = why
	rp.mu.Unlock()
	logger.Warn("replica's engine ended", zap.String("why", why))
}

// maxReplicaLog is the size past which a replica's log is rotated (one
// previous file kept, <name>.log.1) when its engine (re)starts.
const maxReplicaLog = 64 << 20

// openReplicaLog opens the replica's log for appending: one file across
// restarts, like `kubectl logs --previous` and the current log in one.
func openReplicaLog(path string) (*os.File, error) {
	if fi, err := os.Stat(path); err == nil && fi.Size() > maxReplicaLog {
		if err := os.Rename(path, path+".1"); err != nil {
			return nil, fmt.Errorf("rotate replica log: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open replica log: %w", err)
	}
	return f, nil
}

// lastLines returns the last n non-empty lines the file has past offset
// from (one process's output), without the runtime's own notes.
func lastLines(path string, from int64, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	const tail = 16 << 10
	if fi, err := f.Stat(); err == nil {
		from = max(from, fi.Size()-tail)
	}
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return nil
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimRight(l, "\r"); strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "[atelier] ") {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// probe runs the backend's readiness check against one process: a 200
// from ReadinessPath and, for an engine that answers before its weights
// are loaded (vLLM), the served model in the body.
func (s *Serving) probe(ctx context.Context, st replicaState, l launch) bool {
	ctx, cancel := context.WithTimeout(ctx, s.probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL(st.ports.http)+l.info.ReadinessPath, nil)
	if err != nil {
		return false
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return false
	}
	if !l.info.ReadinessListsModel {
		return true
	}
	listed, err := inference.ModelListed(body, l.spec.Model.Served())
	return err == nil && listed
}

// baseURL is a replica's address, as the gateway's proxy reaches it.
func baseURL(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }
