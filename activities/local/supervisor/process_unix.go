//go:build unix

package supervisor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
)

func init() {
	if os.Getenv(envVar) != "1" || len(os.Args) != 1 || os.Args[0] != argv0 {
		return
	}
	// The step's PR_SET_PDEATHSIG fires when the thread that forked it
	// exits: the main goroutine forks and waits on the main thread.
	runtime.LockOSThread()
	os.Exit(serve())
}

// reply is the supervisor's one line to the worker that started it.
type reply struct {
	Pid   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
	Errno int    `json:"errno,omitempty"`
}

// request is what a worker sends a supervisor on its stdin.
type request struct {
	Dir  string `json:"dir"` // the attempt directory
	Spec Spec   `json:"spec"`
}

// Pool starts steps under supervisors. It keeps one supervisor started
// ahead, idle, waiting for its step on its stdin, so that a step does not
// wait for the worker's binary to start (tens of milliseconds for a large
// binary on a busy machine). An idle supervisor whose worker dies reads
// EOF and exits. The zero Pool is ready to use; it is safe for concurrent
// use.
type Pool struct {
	mu   sync.Mutex
	idle *spawned // started ahead, nil while none is ready
	busy bool     // one is being started ahead
}

// Supervisors started ahead exit when no step comes for idleFor; the pool
// hands out none older than staleAfter, so none is given a step as it
// exits.
const (
	idleFor    = 30 * time.Second
	staleAfter = 20 * time.Second
)

// spawned is a supervisor process with its two pipes.
type spawned struct {
	at             time.Time // when it was started
	toSup, fromSup *os.File
	exited         chan struct{} // closed when the process has been waited for
	err            error         // why it could not be started
}

// spawn starts a supervisor. An attached one (PR_SET_PDEATHSIG) is started
// from a goroutine locked to its thread until the supervisor ends, since
// the signal fires when the forking thread exits.
func spawn(attached bool) *spawned {
	sp := &spawned{at: time.Now(), exited: make(chan struct{})}
	exe, err := executable()
	if err != nil {
		sp.err = fmt.Errorf("find the worker's binary to start the step's supervisor: %w", err)
		close(sp.exited)
		return sp
	}
	stdin, toSup, err := os.Pipe()
	if err != nil {
		sp.err = err
		close(sp.exited)
		return sp
	}
	fromSup, replyW, err := os.Pipe()
	if err != nil {
		stdin.Close()
		toSup.Close()
		sp.err = err
		close(sp.exited)
		return sp
	}
	sp.toSup, sp.fromSup = toSup, fromSup
	attr := &syscall.SysProcAttr{Setsid: true} // signals for the worker's group do not reach it
	if attached {
		setPdeathsig(attr)
	}
	started := make(chan error, 1)
	go func() {
		if attached {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
		}
		defer close(sp.exited)
		// fd 3 the reply: not stdout, since a write to a broken pipe on
		// fd 1 or 2 kills a Go program, and the worker may be gone by
		// the time the supervisor answers.
		proc, err := os.StartProcess(exe, []string{argv0}, &os.ProcAttr{
			Env:   []string{envVar + "=1"},
			Files: []*os.File{stdin, nil, nil, replyW},
			Sys:   attr,
		})
		started <- err
		if err != nil {
			return
		}
		_, _ = proc.Wait()
	}()
	sp.err = <-started
	stdin.Close()
	replyW.Close()
	if sp.err != nil {
		toSup.Close()
		fromSup.Close()
		sp.err = fmt.Errorf("start the step's supervisor: %w", sp.err)
	}
	return sp
}

// take returns the idle supervisor, or starts one, and starts the next
// one ahead in the background.
func (pl *Pool) take() *spawned {
	pl.mu.Lock()
	sp := pl.idle
	pl.idle = nil
	warm := !pl.busy
	pl.busy = true
	pl.mu.Unlock()
	if warm {
		go func() {
			next := spawn(false)
			pl.mu.Lock()
			defer pl.mu.Unlock()
			pl.busy = false
			if next.err == nil && pl.idle == nil {
				pl.idle = next
			} else if next.err == nil {
				next.toSup.Close() // a spare: EOF makes it exit
				next.fromSup.Close()
			}
		}()
	}
	if sp != nil && (time.Since(sp.at) > staleAfter || isClosed(sp.exited)) {
		sp.toSup.Close() // it exits, if it has not
		sp.fromSup.Close()
		sp = nil
	}
	if sp == nil {
		sp = spawn(false)
	}
	return sp
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Start starts spec's step in the attempt directory dir under a
// supervisor, its output going to OutputPath(dir), and returns once the
// step's process runs (or could not be started: a *StartError).
func (pl *Pool) Start(dir string, spec Spec) (*Process, error) {
	var sp *spawned
	if spec.OrphanAfter <= 0 {
		sp = spawn(true)
	} else {
		sp = pl.take()
	}
	if sp.err != nil {
		return nil, sp.err
	}
	defer sp.fromSup.Close()
	body, err := json.Marshal(request{Dir: dir, Spec: spec})
	if err != nil {
		sp.toSup.Close()
		return nil, err
	}
	_, werr := sp.toSup.Write(body)
	sp.toSup.Close()
	line, rerr := bufio.NewReader(sp.fromSup).ReadBytes('\n')
	var r reply
	if jerr := json.Unmarshal(line, &r); jerr != nil || werr != nil {
		<-sp.exited
		return nil, fmt.Errorf("the step's supervisor did not start the step (write %v, read %v, reply %q)", werr, rerr, line)
	}
	if r.Error != "" {
		<-sp.exited
		if r.Errno != 0 {
			return nil, &StartError{Msg: r.Error, Errno: syscall.Errno(r.Errno)}
		}
		return nil, errors.New(r.Error)
	}
	st, err := ReadStarted(dir)
	if err != nil || st.Pid != r.Pid {
		return nil, fmt.Errorf("the step's supervisor recorded no start: %v", err)
	}
	p := &Process{Started: st, dir: dir, request: spec.Request, execution: spec.Execution, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		<-sp.exited
		p.exit, p.err = p.readExit()
	}()
	return p, nil
}

// readExit reads exit.json once the supervisor has ended.
func (p *Process) readExit() (Exited, error) {
	ex, err := ReadExited(p.dir)
	if errors.Is(err, os.ErrNotExist) {
		return Exited{}, ErrLost
	}
	if err == nil && (ex.Request != p.request || ex.Execution != p.execution) {
		return Exited{}, ErrLost
	}
	return ex, err
}

// Adopt watches the step st names, started by an earlier worker. The
// caller has checked that its supervisor is alive or the step has ended
// (Alive, ReadExited).
func Adopt(dir string, st Started, poll time.Duration) *Process {
	p := &Process{Started: st, dir: dir, request: st.Request, execution: st.Execution, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			if ex, err := p.readExit(); err == nil {
				p.exit = ex
				return
			}
			if !Alive(st) {
				// It may have written exit.json just before it exited.
				p.exit, p.err = p.readExit()
				return
			}
			time.Sleep(poll)
		}
	}()
	return p
}

// Alive reports whether the supervisor st names is still running: the
// same boot, and a process with its pid that started when it did (process
// ids are recycled, and a reboot makes them meaningless).
func Alive(st Started) bool {
	if st.Supervisor <= 1 || st.BootID != bootID() {
		return false
	}
	return isSupervisor(st.Supervisor, st.SupervisorStart)
}

// serve is the supervisor process: see the package doc.
func serve() int {
	hardenSupervisor()
	replyTo := os.NewFile(3, "reply")
	answer := func(r reply) {
		b, _ := json.Marshal(r)
		_, _ = replyTo.Write(append(b, '\n')) // EPIPE if the worker is gone
		replyTo.Close()
	}
	var req request
	// Non-blocking, so the read can time out: os.StartProcess handed the
	// pipe over in blocking mode.
	_ = syscall.SetNonblock(0, true)
	stdin := os.NewFile(0, "stdin")
	_ = stdin.SetReadDeadline(time.Now().Add(idleFor))
	if err := json.NewDecoder(stdin).Decode(&req); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) {
			return 0 // started ahead, and no step came or the worker went away
		}
		answer(reply{Error: "read the step's spec: " + err.Error()})
		return 2
	}
	stdin.Close()
	dir, spec := req.Dir, req.Spec
	out, err := os.OpenFile(OutputPath(dir), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		answer(reply{Error: "create the step's output file: " + err.Error()})
		return 1
	}
	attr := &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(attr)
	if c := spec.Credential; c != nil {
		attr.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: []uint32{}}
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		answer(reply{Error: err.Error()})
		return 1
	}
	proc, err := os.StartProcess(spec.Path, spec.Args, &os.ProcAttr{Dir: spec.Dir, Env: spec.Env,
		Files: []*os.File{devNull, out, out}, Sys: attr})
	devNull.Close()
	out.Close()
	if err != nil {
		r := reply{Error: err.Error()}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			r.Errno = int(errno)
		}
		answer(r)
		return 1
	}
	pid := proc.Pid
	st := Started{Request: spec.Request, Execution: spec.Execution, Supervisor: os.Getpid(), SupervisorStart: processStart(os.Getpid()),
		Pid: pid, StartedAt: time.Now(), BootID: bootID(), Attached: spec.OrphanAfter <= 0}
	if err := WriteJSON(filepath.Join(dir, startedFile), st, false); err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_, _ = proc.Wait()
		answer(reply{Error: "record the step's start: " + err.Error()})
		return 1
	}
	answer(reply{Pid: pid})

	orphaned := make(chan string, 1)
	if spec.OrphanAfter > 0 {
		go watchLease(dir, pid, spec, orphaned)
	}
	ps, _ := proc.Wait()
	// Like a pod whose container exited: nothing the step started outlives it.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	ex := Exited{Request: spec.Request, Execution: spec.Execution, ExitCode: -1, FinishedAt: time.Now()}
	if ps != nil {
		ex.ExitCode = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ex.ExitCode, ex.Signal = 128+int(ws.Signal()), ws.Signal().String()
		}
	}
	select {
	case ex.Orphaned = <-orphaned:
	default:
	}
	if err := WriteJSON(filepath.Join(dir, exitFile), ex, false); err != nil {
		return 1
	}
	return 0
}

// watchLease stops the step once no worker has renewed its lease for
// spec.OrphanAfter, and says why on orphaned.
func watchLease(dir string, pid int, spec Spec, orphaned chan<- string) {
	since := time.Now()
	every := min(max(spec.OrphanAfter/4, 10*time.Millisecond), 5*time.Second)
	for {
		time.Sleep(every)
		last := since
		if fi, err := os.Stat(filepath.Join(dir, leaseFile)); err == nil && fi.ModTime().After(last) {
			last = fi.ModTime()
		}
		if time.Since(last) < spec.OrphanAfter {
			continue
		}
		orphaned <- fmt.Sprintf("no worker watched the step for %s (its worker was lost and none on this machine took it over); the supervisor stopped it",
			spec.OrphanAfter)
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		time.Sleep(spec.Grace)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return
	}
}
