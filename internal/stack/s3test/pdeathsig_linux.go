package s3test

import (
	"os/exec"
	"syscall"
)

// parentDeathSignal makes the kernel SIGKILL the server when the test
// binary dies (killed by -timeout, or SIGKILL), so no versitygw is orphaned
// holding its port.
func parentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
