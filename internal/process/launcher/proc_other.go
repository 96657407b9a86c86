//go:build !unix

package launcher

import (
	"os"
	"os/exec"
)

// Elsewhere than Unix the launcher signals the command alone.

func ownGroup(*exec.Cmd) {}

func signalGroup(p *os.Process, s os.Signal) { _ = p.Signal(s) }

func killGroup(*os.Process) {}
