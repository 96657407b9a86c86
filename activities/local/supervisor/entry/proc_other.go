//go:build !linux

package entry

import "syscall"

// SetPdeathsig does nothing: only Linux has PR_SET_PDEATHSIG, so an
// attached supervisor outlives a killed worker and the next worker kills
// the step as before adoption existed.
func SetPdeathsig(*syscall.SysProcAttr) {}

func harden() {}

// BootID is unknown here.
func BootID() string { return "" }

// ProcessStart is unknown here.
func ProcessStart(int) uint64 { return 0 }

// StatFields is nil here: there is no /proc.
func StatFields(int) []string { return nil }
