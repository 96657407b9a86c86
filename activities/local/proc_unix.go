//go:build unix

package local

import (
	"errors"
	"os"
	"syscall"
)

const platformSupported = true

// signalGroup signals every process of a group. ESRCH (the group is already
// gone) is not an error for callers that only want it dead.
func signalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 || pgid == syscall.Getpgrp() {
		return errors.New("refusing to signal a system or the worker's own process group")
	}
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// exitStatus reports the exit code the way a shell or a Kubernetes container
// status does: 128+N for death by signal N.
func exitStatus(ps *os.ProcessState) (code int, signal string) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal().String()
	}
	return ps.ExitCode(), ""
}

// isStartProblem tells errors that re-running cannot fix (the program is not
// runnable) from transient ones (fork limits, memory).
func isStartProblem(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENOENT, syscall.EACCES, syscall.ENOEXEC,
		syscall.E2BIG, syscall.ENOTDIR, syscall.EISDIR, syscall.EPERM, syscall.ELOOP, syscall.ENAMETOOLONG} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
