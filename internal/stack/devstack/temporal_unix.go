//go:build unix

package devstack

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// LockFile takes an exclusive flock on path (shared by the tool builds of
// devstack and internal/stack/kubetest), polling so that ctx can cancel
// the wait (a blocking flock cannot be interrupted). waiting is called every
// temporalProgressEvery while another process holds the lock. The kernel drops the
// lock if the holder dies, so a crashed build never wedges later callers.
func LockFile(ctx context.Context, path string, waiting func(time.Duration)) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	lastReport := start
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
		if time.Since(lastReport) >= temporalProgressEvery || lastReport == start {
			waiting(time.Since(start))
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// temporalProcAttrs puts the server in its own process group so Stop can signal
// everything it spawned at once, and so a terminal Ctrl-C reaches only our
// process: the dev command then stops workers before the server instead of
// both dying at the same moment. See also temporalParentDeathSignal.
func temporalProcAttrs(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	temporalParentDeathSignal(cmd.SysProcAttr)
}

// temporalInterrupt asks the server's process group to shut down gracefully.
func temporalInterrupt(p *os.Process) error {
	return syscall.Kill(-p.Pid, syscall.SIGINT)
}

// temporalKill kills the server's whole process group.
func temporalKill(p *os.Process) error {
	return syscall.Kill(-p.Pid, syscall.SIGKILL)
}
