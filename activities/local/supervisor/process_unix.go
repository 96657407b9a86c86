//go:build unix

package supervisor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/atelier-ml/atelier/activities/local/supervisor/entry"
)

// reply is the supervisor's one line to the worker that started it.
type reply struct {
	Pid   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
	Errno int    `json:"errno,omitempty"`
}

// Pool starts steps under supervisors. A supervisor runs one step at a
// time; when the step has ended it goes back to the pool, idle on its
// stdin, and runs a later one, so that a step seldom waits for the
// worker's binary to start (tens of milliseconds of CPU for a large binary
// on a busy machine). When the pool has none idle it also starts one ahead
// for the next step. An idle supervisor exits when no step comes for
// entry.IdleFor, or when its worker dies (EOF). The zero Pool is ready to
// use; it is safe for concurrent use.
type Pool struct {
	mu      sync.Mutex
	idle    []*spawned // most recently used last
	warming bool       // one is being started ahead
}

// The pool hands out no supervisor idle for longer than staleAfter, so
// none is given a step as it exits.
const staleAfter = entry.IdleFor - 10*time.Second

// spawned is a supervisor process with its pipes.
type spawned struct {
	idleSince      time.Time
	toSup, fromSup *os.File
	replies        *bufio.Reader // over fromSup
	exited         chan struct{} // closed when the process has been waited for
	err            error         // why it could not be started
}

// close closes the pipes: an idle supervisor exits on EOF.
func (sp *spawned) close() {
	sp.toSup.Close()
	sp.fromSup.Close()
}

// spawn starts a supervisor. An attached one (PR_SET_PDEATHSIG) is started
// from a goroutine locked to its thread until the supervisor ends, since
// the signal fires when the forking thread exits.
func spawn(attached bool) *spawned {
	sp := &spawned{idleSince: time.Now(), exited: make(chan struct{})}
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
	sp.toSup, sp.fromSup, sp.replies = toSup, fromSup, bufio.NewReader(fromSup)
	attr := &syscall.SysProcAttr{Setsid: true} // signals for the worker's group do not reach it
	if attached {
		entry.SetPdeathsig(attr)
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
		proc, err := os.StartProcess(exe, []string{entry.Argv0}, &os.ProcAttr{
			Env:   []string{entry.EnvVar + "=1"},
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

// take returns an idle supervisor, or starts one, and starts one ahead
// when none is left idle.
func (pl *Pool) take() *spawned {
	pl.mu.Lock()
	var sp *spawned
	for sp == nil && len(pl.idle) > 0 {
		sp = pl.idle[len(pl.idle)-1]
		pl.idle = pl.idle[:len(pl.idle)-1]
		if time.Since(sp.idleSince) > staleAfter || isClosed(sp.exited) {
			sp.close() // it exits, if it has not
			sp = nil
		}
	}
	warm := len(pl.idle) == 0 && !pl.warming
	pl.warming = pl.warming || warm
	pl.mu.Unlock()
	if warm {
		go func() {
			next := spawn(false)
			pl.mu.Lock()
			pl.warming = false
			pl.mu.Unlock()
			if next.err == nil {
				pl.put(next)
			}
		}()
	}
	if sp == nil {
		sp = spawn(false)
	}
	return sp
}

// put makes sp idle again, and lets go of the supervisors idle too long
// (they exit by themselves; their pipes are closed here).
func (pl *Pool) put(sp *spawned) {
	sp.idleSince = time.Now()
	pl.mu.Lock()
	defer pl.mu.Unlock()
	n := 0
	for n < len(pl.idle) && time.Since(pl.idle[n].idleSince) > staleAfter {
		pl.idle[n].close()
		n++
	}
	pl.idle = append(pl.idle[n:], sp)
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
	body, err := entry.EncodeSpec(dir, spec)
	if err != nil {
		return nil, err
	}
	attached := spec.OrphanAfter <= 0
	var sp *spawned
	if attached {
		sp = spawn(true) // never reused: it must die with this thread
	} else {
		sp = pl.take()
	}
	if sp.err != nil {
		return nil, sp.err
	}
	_, werr := sp.toSup.Write(body)
	if attached {
		sp.toSup.Close() // it exits after this step
	}
	line, rerr := sp.replies.ReadBytes('\n')
	var r reply
	if jerr := json.Unmarshal(line, &r); jerr != nil || werr != nil {
		sp.close()
		<-sp.exited
		return nil, fmt.Errorf("the step's supervisor did not start the step (write %v, read %v, reply %q)", werr, rerr, line)
	}
	if r.Error != "" {
		if attached {
			sp.close()
		} else {
			pl.put(sp) // it could not start this step; it can run others
		}
		if r.Errno != 0 {
			return nil, &StartError{Msg: r.Error, Errno: syscall.Errno(r.Errno)}
		}
		return nil, errors.New(r.Error)
	}
	st, err := ReadStarted(dir)
	if err != nil || st.Pid != r.Pid {
		sp.close()
		return nil, fmt.Errorf("the step's supervisor recorded no start: %v", err)
	}
	p := &Process{Started: st, dir: dir, request: spec.Request, execution: spec.Execution, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		// "exited" once exit.json is written; EOF if the supervisor died
		// (or could not write the record).
		line, _ := sp.replies.ReadBytes('\n')
		if string(line) != "exited\n" {
			sp.close()
			<-sp.exited
		} else if attached {
			sp.close()
		} else {
			pl.put(sp)
		}
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
	if st.Supervisor <= 1 || st.BootID != entry.BootID() {
		return false
	}
	return isSupervisor(st.Supervisor, st.SupervisorStart)
}
