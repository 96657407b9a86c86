//go:build unix && !linux

package local

import (
	"errors"
	"syscall"
)

// sysProcAttr puts the step in its own process group. Only Linux has a
// parent-death signal; elsewhere a crashed worker leaves the step running
// until a retried attempt kills its group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// groupState cannot inspect environments without /proc, so any live group on
// the same host is taken as ours: less safe than on Linux, where the
// environment is checked.
func groupState(pgid int, _ []string) (alive, owned bool) {
	err := syscall.Kill(-pgid, 0)
	if err == nil {
		return true, true
	}
	return errors.Is(err, syscall.EPERM), false
}

// setCredential makes the step's process run as u, with no supplementary
// groups.
func setCredential(a *syscall.SysProcAttr, u *StepUser) {
	a.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
}

// HardenWorker is Linux-only (PR_SET_DUMPABLE); elsewhere a step running as
// another user is what keeps it from the worker's memory.
func HardenWorker() error { return nil }
