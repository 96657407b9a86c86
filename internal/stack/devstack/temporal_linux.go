package devstack

import "syscall"

// temporalParentDeathSignal makes the kernel SIGKILL the server when the process
// that started it dies (test binary killed by -timeout, `atelier dev` killed
// with SIGKILL), so no dev server is orphaned holding ports. Because the
// server runs in its own process group it would otherwise survive.
// Caveat: Linux ties this to the starting OS thread, and Go retires the
// thread of a goroutine that exits while locked with runtime.LockOSThread
// (other harnesses do that): StartTemporal forks from a goroutine locked
// to its thread for the server's whole life, so no other goroutine can.
func temporalParentDeathSignal(a *syscall.SysProcAttr) {
	a.Pdeathsig = syscall.SIGKILL
}
