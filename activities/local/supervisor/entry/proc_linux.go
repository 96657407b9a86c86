//go:build linux

package entry

import (
	"os"
	"syscall"
)

// SetPdeathsig ties a child to the thread that forks it.
func SetPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// harden makes the supervisor non-dumpable: it holds the step's
// environment (secrets included), which a process of the step's user must
// not read through /proc.
func harden() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0)
}

// BootID identifies this boot of the machine.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return string(b)
}

// StatFields are the fields of /proc/<pid>/stat after the command (the
// state is [0], the process group [2], the start time [19]); nil if the
// process is gone. The command is in parentheses and may hold anything,
// spaces and ')' included, so fields start after the last ')'.
func StatFields(pid int) []string {
	stat, err := os.ReadFile("/proc/" + itoa(int64(pid)) + "/stat")
	if err != nil {
		return nil
	}
	i := len(stat) - 1
	for i >= 0 && stat[i] != ')' {
		i--
	}
	if i < 0 {
		return nil
	}
	var fields []string
	start := -1
	for j := i + 1; j <= len(stat); j++ {
		if j == len(stat) || stat[j] == ' ' || stat[j] == '\n' {
			if start >= 0 {
				fields = append(fields, string(stat[start:j]))
				start = -1
			}
			continue
		}
		if start < 0 {
			start = j
		}
	}
	return fields
}

// ProcessStart is when pid started, in clock ticks since boot (field 22 of
// /proc/<pid>/stat); 0 if unknown or the process is a zombie.
func ProcessStart(pid int) uint64 {
	f := StatFields(pid)
	if len(f) < 20 || f[0] == "Z" {
		return 0
	}
	n, ok := atoi(f[19])
	if !ok || n < 0 {
		return 0
	}
	return uint64(n)
}
