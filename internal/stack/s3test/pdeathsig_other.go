//go:build !linux

package s3test

import "os/exec"

// parentDeathSignal is Linux-only; elsewhere the test's cleanup is what
// stops the server.
func parentDeathSignal(*exec.Cmd) {}
