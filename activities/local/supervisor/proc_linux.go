//go:build linux

package supervisor

import "github.com/atelier-ml/atelier/activities/local/supervisor/entry"

// executable is the running binary, even if it was replaced on disk since.
func executable() (string, error) { return "/proc/self/exe", nil }

// isSupervisor tells whether pid is a live (not zombie) process that
// started at start.
func isSupervisor(pid int, start uint64) bool {
	return start != 0 && entry.ProcessStart(pid) == start
}
