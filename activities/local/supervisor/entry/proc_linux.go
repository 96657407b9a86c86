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

// ProcessStart is when pid started, in clock ticks since boot (field 22 of
// /proc/<pid>/stat); 0 if unknown or the process is a zombie.
func ProcessStart(pid int) uint64 {
	stat, err := os.ReadFile("/proc/" + itoa(int64(pid)) + "/stat")
	if err != nil {
		return 0
	}
	// The command is in parentheses and may hold anything: fields start
	// after the last ')'. State is field 3, starttime field 22.
	i := len(stat) - 1
	for i >= 0 && stat[i] != ')' {
		i--
	}
	if i < 0 {
		return 0
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
	if len(fields) < 20 || fields[0] == "Z" {
		return 0
	}
	n, ok := atoi(fields[19])
	if !ok || n < 0 {
		return 0
	}
	return uint64(n)
}
