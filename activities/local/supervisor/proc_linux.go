//go:build linux

package supervisor

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// executable is the running binary, even if it was replaced on disk since.
func executable() (string, error) { return "/proc/self/exe", nil }

func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// hardenSupervisor makes the supervisor non-dumpable: it holds the step's
// environment (secrets included), which a process of the step's user must
// not read through /proc.
func hardenSupervisor() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0)
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// processStart is when pid started, in clock ticks since boot (field 22
// of /proc/<pid>/stat), 0 if unknown.
func processStart(pid int) uint64 {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	// After the command: state is field 3, starttime field 22.
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 || f[0] == "Z" {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// isSupervisor tells whether pid is a live (not zombie) process that
// started at start.
func isSupervisor(pid int, start uint64) bool {
	return start != 0 && processStart(pid) == start
}
