//go:build unix

package entry

import (
	"errors"
	"os"
	"runtime"
	"syscall"
	"time"
)

// Supervisors started ahead (package supervisor's Pool) exit when no step
// comes for IdleFor.
const IdleFor = 30 * time.Second

func init() {
	if len(os.Args) != 1 || os.Args[0] != Argv0 || os.Getenv(EnvVar) != "1" {
		return
	}
	// The step's PR_SET_PDEATHSIG fires when the thread that forked it
	// exits: the main goroutine forks and waits on the main thread.
	runtime.LockOSThread()
	os.Exit(serve())
}

// serve is the supervisor process: see package supervisor's doc. It runs
// the steps its worker sends, one at a time, until no step comes for
// IdleFor or the worker is gone (EOF on stdin).
func serve() int {
	harden()
	// The worker reads one line when a step started (or could not), and
	// "exited" when its exit.json is written. Writes fail with EPIPE once
	// the worker is gone.
	replyTo := os.NewFile(3, "reply")
	defer replyTo.Close()
	answer := func(b []byte) { _, _ = replyTo.Write(b) }
	// Non-blocking, so reads can time out: os.StartProcess handed the pipe
	// over in blocking mode.
	_ = syscall.SetNonblock(0, true)
	stdin := os.NewFile(0, "stdin")
	defer stdin.Close()
	var pending []byte
	buf := make([]byte, 64<<10)
	for {
		_ = stdin.SetReadDeadline(time.Now().Add(IdleFor))
		dir, spec, rest, err := decodeSpec(pending)
		for err == errIncomplete {
			n, rerr := stdin.Read(buf)
			pending = append(pending, buf[:n]...)
			if rerr != nil && n == 0 {
				return 0 // no step came, or the worker is gone
			}
			dir, spec, rest, err = decodeSpec(pending)
		}
		pending = append(pending[:0], rest...)
		if err != nil {
			answer(object("error", str("read the step's spec: "+err.Error())))
			return 2
		}
		runStep(dir, spec, answer)
	}
}

// runStep runs one step and records it (see package supervisor's doc).
func runStep(dir string, spec Spec, answer func([]byte)) {
	fail := func(msg string, errno syscall.Errno) {
		kv := []string{"error", str(msg)}
		if errno != 0 {
			kv = append(kv, "errno", num(int64(errno)))
		}
		answer(object(kv...))
	}
	out, err := os.OpenFile(dir+"/"+OutputFile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		fail("create the step's output file: "+err.Error(), 0)
		return
	}
	attr := &syscall.SysProcAttr{Setpgid: true}
	SetPdeathsig(attr)
	if c := spec.Credential; c != nil {
		attr.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: []uint32{}}
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		out.Close()
		fail(err.Error(), 0)
		return
	}
	startedAt := time.Now() // as a worker forking it itself would say
	proc, err := os.StartProcess(spec.Path, spec.Args, &os.ProcAttr{Dir: spec.Dir, Env: spec.Env,
		Files: []*os.File{devNull, out, out}, Sys: attr})
	devNull.Close()
	out.Close()
	if err != nil {
		var errno syscall.Errno
		errors.As(err, &errno)
		fail(err.Error(), errno)
		return
	}
	pid := proc.Pid
	started := object(
		"request", str(spec.Request), "execution", num(int64(spec.Execution)),
		"supervisor", num(int64(os.Getpid())), "supervisorStart", num(int64(ProcessStart(os.Getpid()))),
		"pid", num(int64(pid)), "startedAt", stamp(startedAt), "bootId", str(BootID()),
		"attached", boolean(spec.OrphanAfter <= 0))
	if err := writeRecord(dir, StartedFile, started); err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_, _ = proc.Wait()
		fail("record the step's start: "+err.Error(), 0)
		return
	}
	answer(object("pid", num(int64(pid))))

	orphaned := make(chan string, 1)
	ended := make(chan struct{})
	if spec.OrphanAfter > 0 {
		go watchLease(dir, pid, spec, ended, orphaned)
	}
	ps, _ := proc.Wait()
	finishedAt := time.Now()
	close(ended)
	// Like a pod whose container exited: nothing the step started outlives it.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	code, signal := -1, ""
	if ps != nil {
		code = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code, signal = 128+int(ws.Signal()), ws.Signal().String()
		}
	}
	kv := []string{"request", str(spec.Request), "execution", num(int64(spec.Execution)),
		"exitCode", num(int64(code)), "finishedAt", stamp(finishedAt)}
	if signal != "" {
		kv = append(kv, "signal", str(signal))
	}
	select {
	case why := <-orphaned:
		kv = append(kv, "orphaned", str(why))
	default:
	}
	if err := writeRecord(dir, ExitFile, object(kv...)); err != nil {
		os.Exit(1) // the worker sees the supervisor end without a record
	}
	answer([]byte("exited\n"))
}

// watchLease stops the step once no worker has renewed its lease for
// spec.OrphanAfter, and says why on orphaned.
func watchLease(dir string, pid int, spec Spec, ended <-chan struct{}, orphaned chan<- string) {
	since := time.Now()
	every := min(max(spec.OrphanAfter/4, 10*time.Millisecond), 5*time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ended:
			return
		case <-tick.C:
		}
		last := since
		if fi, err := os.Stat(dir + "/" + LeaseFile); err == nil && fi.ModTime().After(last) {
			last = fi.ModTime()
		}
		if time.Since(last) < spec.OrphanAfter {
			continue
		}
		orphaned <- "no worker watched the step for " + spec.OrphanAfter.String() +
			" (its worker was lost and none on this machine took it over); the supervisor stopped it"
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		time.Sleep(spec.Grace)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return
	}
}
