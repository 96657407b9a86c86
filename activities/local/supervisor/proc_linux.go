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

// isSupervisorOf tells whether pid is a live supervisor of dir, by its
// command line (readable whoever owns the process, unlike its environment).
func isSupervisorOf(pid int, dir string) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || bytes.HasPrefix(bytes.TrimSpace(stat[i+1:]), []byte("Z")) {
		return false // a zombie has ended
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	return string(cmdline) == argv0+"\x00"+dir+"\x00"
}
