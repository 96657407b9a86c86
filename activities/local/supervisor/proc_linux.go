//go:build linux

package supervisor

import (
	"os"

	"github.com/atelier-ml/atelier/activities/local/supervisor/entry"
)

// executable is the running binary, even if it was replaced on disk since
// (or the binary BinaryEnv names).
func executable() (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		return p, nil
	}
	return "/proc/self/exe", nil
}

// isSupervisor tells whether pid is a live (not zombie) process that
// started at start.
func isSupervisor(pid int, start uint64) bool {
	return start != 0 && entry.ProcessStart(pid) == start
}
