package devstack

import "syscall"

// temporalParentDeathSignal makes the kernel SIGKILL the server when the process
// that started it dies (test binary killed by -timeout, `atelier dev` killed
// with SIGKILL), so no dev server is orphaned holding ports. Because the
// server runs in its own process group it would otherwise survive.
// Caveat: Linux ties this to the starting OS thread; Go only retires threads
// of goroutines that exit while locked with runtime.LockOSThread, which our
// callers do not do.
func temporalParentDeathSignal(a *syscall.SysProcAttr) {
	a.Pdeathsig = syscall.SIGKILL
}
