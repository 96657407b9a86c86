//go:build linux

package local

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/atelier-ml/atelier/activities/local/supervisor"
)

// sysProcAttr puts the step in its own process group and ties the group
// leader's life to the forking thread (see the package doc for why the
// runner pins that thread).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// groupState reports whether a process group has live (non-zombie) members
// and whether one of them carries all of marker in its environment. The
// marker check is what makes killing a group id read from an old heartbeat
// safe: ids are recycled, and the group could now belong to anything.
func groupState(pgid int, marker []string) (alive, owned bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false, false
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := supervisor.StatFields(pid)
		if len(f) < 3 {
			continue // exited meanwhile
		}
		state, pgrp := f[0], f[2]
		if pgrp != strconv.Itoa(pgid) || state == "Z" || state == "X" {
			continue
		}
		alive = true
		if hasEnv(pid, marker) {
			return true, true
		}
	}
	return alive, false
}

func hasEnv(pid int, marker []string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	have := make(map[string]bool)
	for _, kv := range bytes.Split(b, []byte{0}) {
		have[string(kv)] = true
	}
	for _, m := range marker {
		if !have[m] {
			return false
		}
	}
	return true
}

// setCredential makes the step's process run as u, with no supplementary
// groups (the worker's groups would give it the worker's group access).
func setCredential(a *syscall.SysProcAttr, u *StepUser) {
	a.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
}

// HardenWorker makes the worker process non-dumpable: /proc/<pid>/environ,
// mem and friends become readable only with CAP_SYS_PTRACE, so a step
// running as another user (or the same unprivileged one) cannot read the
// worker's environment, and no core dump spills its secrets. Call it once
// when a worker that runs local steps starts.
func HardenWorker() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", errno)
	}
	return nil
}
