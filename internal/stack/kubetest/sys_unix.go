//go:build unix

package kubetest

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
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
