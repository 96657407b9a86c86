//go:build unix && !linux

package supervisor

import (
	"os"
	"syscall"
)

func executable() (string, error) { return os.Executable() }

// No PR_SET_PDEATHSIG here: an attached supervisor outlives a killed
// worker, and the next worker kills the step as before adoption existed.
func setPdeathsig(*syscall.SysProcAttr) {}

func hardenSupervisor() {}

func bootID() string { return "" }

func processStart(int) uint64 { return 0 }

// isSupervisor can only tell that pid is alive: without /proc it cannot
// see when the process started.
func isSupervisor(pid int, _ uint64) bool { return syscall.Kill(pid, 0) == nil }
