//go:build unix && !linux

package supervisor

import (
	"os"
	"syscall"
)

func executable() (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		return p, nil
	}
	return os.Executable()
}

// isSupervisor can only tell that pid is alive: without /proc it cannot
// see when the process started.
func isSupervisor(pid int, _ uint64) bool { return syscall.Kill(pid, 0) == nil }
