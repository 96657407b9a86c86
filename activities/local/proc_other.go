//go:build !unix

package local

import (
	"errors"
	"os"
	"syscall"
)

// The local runtime relies on Unix process groups; on other systems every
// step fails with InvalidStep instead of the worker failing to build.
const platformSupported = false

var errUnsupported = errors.New("the local runtime needs a Unix system")

func sysProcAttr() *syscall.SysProcAttr             { return nil }
func groupState(int, []string) (alive, owned bool)  { return false, false }
func signalGroup(int, syscall.Signal) error         { return errUnsupported }
func exitStatus(ps *os.ProcessState) (int, string)  { return ps.ExitCode(), "" }
func isStartProblem(error) bool                     { return true }
func setCredential(*syscall.SysProcAttr, *StepUser) {}

// HardenWorker has nothing to do where steps cannot run.
func HardenWorker() error { return nil }
