//go:build unix && !linux

package devstack

import "syscall"

// temporalParentDeathSignal is Linux-only; elsewhere a server outlives a parent
// killed with SIGKILL (a clean exit still calls Stop).
func temporalParentDeathSignal(*syscall.SysProcAttr) {}
