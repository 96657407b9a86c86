//go:build unix

package kubetest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// procAttrs puts a server in its own process group, so stopping it signals
// everything it spawned and a terminal Ctrl-C aimed at `go test` does not
// race Stop. See parentDeathSignal for what happens if the test binary dies.
func procAttrs(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	parentDeathSignal(cmd.SysProcAttr)
}

// terminate asks a server's process group to shut down gracefully.
func terminate(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGTERM) }

// kill kills a server's whole process group.
func kill(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGKILL) }

// processExists reports whether pid names a live process (or one we may
// not signal, which is just as much not ours to clean up after).
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// lockFile takes an exclusive flock on path, polling so that ctx can cancel
// the wait (a blocking flock cannot be interrupted). waiting is called now
// and then while another process holds the lock. The kernel drops the lock
// when its holder dies, so a killed build never wedges later test runs.
func lockFile(ctx context.Context, path string, waiting func(time.Duration)) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var reported time.Time
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, err
		}
		if time.Since(reported) >= progressEvery {
			waiting(time.Since(start))
			reported = time.Now()
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
