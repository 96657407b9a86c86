//go:build unix && !linux

package kubetest

import "syscall"

// parentDeathSignal is Linux-only; elsewhere Main's Stop is what cleans up.
func parentDeathSignal(*syscall.SysProcAttr) {}
