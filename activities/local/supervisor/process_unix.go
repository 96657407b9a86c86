//go:build unix

package supervisor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

func init() {
	if os.Getenv(envVar) != "1" || len(os.Args) != 2 || os.Args[0] != argv0 {
		return
	}
	// The step's PR_SET_PDEATHSIG fires when the thread that forked it
	// exits: the main goroutine forks and waits on the main thread.
	runtime.LockOSThread()
	os.Exit(serve(os.Args[1]))
}

// reply is the supervisor's one line to the worker that started it.
type reply struct {
	Pid   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
	Errno int    `json:"errno,omitempty"`
}

// Start starts a supervisor for spec in the attempt directory dir, the
// step's output going to output (OutputPath), and returns once the step's
// process runs (or could not be started: a *StartError).
func Start(dir string, spec Spec, output *os.File) (*Process, error) {
	exe, err := executable()
	if err != nil {
		return nil, fmt.Errorf("find the worker's binary to start the step's supervisor: %w", err)
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	stdin, toSup, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	fromSup, replyW, err := os.Pipe()
	if err != nil {
		stdin.Close()
		toSup.Close()
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:       exe,
		Args:       []string{argv0, dir},
		Env:        []string{envVar + "=1"},
		Stdin: stdin,
		// fd 3 the step's output, fd 4 the reply: not stdout, since a
		// write to a broken pipe on fd 1 or 2 kills a Go program, and the
		// worker may be gone by the time the supervisor answers.
		ExtraFiles: []*os.File{output, replyW},
		// A session of its own: signals for the worker's terminal or
		// process group do not reach it.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if spec.OrphanAfter <= 0 {
		setPdeathsig(cmd.SysProcAttr)
	}
	p := &Process{dir: dir, request: spec.Request, execution: spec.Execution, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// An attached supervisor's Pdeathsig fires when the forking
		// thread exits: keep this goroutine on it until the end.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(p.done)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		p.exit, p.err = p.readExit()
	}()
	err = <-started
	stdin.Close()
	replyW.Close()
	defer fromSup.Close()
	if err != nil {
		toSup.Close()
		return nil, fmt.Errorf("start the step's supervisor: %w", err)
	}
	_, werr := toSup.Write(specJSON)
	toSup.Close()
	line, rerr := bufio.NewReader(fromSup).ReadBytes('\n')
	var r reply
	if jerr := json.Unmarshal(line, &r); jerr != nil || werr != nil {
		<-p.done
		return nil, fmt.Errorf("the step's supervisor did not start the step (write %v, read %v, reply %q)", werr, rerr, line)
	}
	if r.Error != "" {
		<-p.done
		if r.Errno != 0 {
			return nil, &StartError{Msg: r.Error, Errno: syscall.Errno(r.Errno)}
		}
		return nil, errors.New(r.Error)
	}
	st, err := ReadStarted(dir)
	if err != nil || st.Pid != r.Pid {
		return nil, fmt.Errorf("the step's supervisor recorded no start: %v", err)
	}
	p.Started = st
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
			if !Alive(dir, st) {
				// It may have written exit.json just before it exited.
				p.exit, p.err = p.readExit()
				return
			}
			time.Sleep(poll)
		}
	}()
	return p
}

// Alive reports whether the supervisor st names is still running and is
// the one of dir (process ids are recycled, and a reboot makes them
// meaningless).
func Alive(dir string, st Started) bool {
	if st.Supervisor <= 1 || st.BootID != bootID() {
		return false
	}
	return isSupervisorOf(st.Supervisor, dir)
}

// serve is the supervisor process: see the package doc.
func serve(dir string) int {
	hardenSupervisor()
	replyTo := os.NewFile(4, "reply")
	answer := func(r reply) {
		b, _ := json.Marshal(r)
		_, _ = replyTo.Write(append(b, '\n')) // EPIPE if the worker is gone
		replyTo.Close()
	}
	var spec Spec
	if err := json.NewDecoder(os.Stdin).Decode(&spec); err != nil {
		answer(reply{Error: "read the step's spec: " + err.Error()})
		return 2
	}
	os.Stdin.Close()
	out := os.NewFile(3, "output")
	attr := &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(attr)
	if c := spec.Credential; c != nil {
		attr.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: []uint32{}}
	}
	cmd := &exec.Cmd{Path: spec.Path, Args: spec.Args, Env: spec.Env, Dir: spec.Dir, Stdout: out, Stderr: out, SysProcAttr: attr}
	if err := cmd.Start(); err != nil {
		r := reply{Error: err.Error()}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			r.Errno = int(errno)
		}
		answer(r)
		return 1
	}
	out.Close()
	pid := cmd.Process.Pid
	st := Started{Request: spec.Request, Execution: spec.Execution, Supervisor: os.Getpid(), Pid: pid,
		StartedAt: time.Now(), BootID: bootID(), Attached: spec.OrphanAfter <= 0}
	if err := WriteJSON(filepath.Join(dir, startedFile), st, false); err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = cmd.Wait()
		answer(reply{Error: "record the step's start: " + err.Error()})
		return 1
	}
	answer(reply{Pid: pid})

	orphaned := make(chan string, 1)
	if spec.OrphanAfter > 0 {
		go watchLease(dir, pid, spec, orphaned)
	}
	_ = cmd.Wait()
	// Like a pod whose container exited: nothing the step started outlives it.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	ex := Exited{Request: spec.Request, Execution: spec.Execution, ExitCode: -1, FinishedAt: time.Now()}
	if ps := cmd.ProcessState; ps != nil {
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
