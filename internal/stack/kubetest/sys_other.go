//go:build !unix

package kubetest

import (
	"os"
	"os/exec"
)

// kubetest runs kube-apiserver and etcd as local processes, which Atelier
// only does on Unix; these stubs keep the package compiling elsewhere.

func procAttrs(*exec.Cmd) {}

func terminate(p *os.Process) error { return p.Kill() }

func kill(p *os.Process) error { return p.Kill() }

// processExists errs on the side of keeping other runs' temp dirs.
func processExists(int) bool { return true }
