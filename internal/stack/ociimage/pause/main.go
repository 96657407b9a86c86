// Command pause is the first process of every pod sandbox on the tests'
// real node (internal/stack/kubetest RealNode): it holds the pod's
// namespaces and does nothing, like Kubernetes' own pause. It exits at
// SIGTERM or SIGINT, at once (so deleting a pod does not wait out a grace
// period), and reaps children, should it be PID 1 of a shared PID namespace.
//
// It is built static (CGO_ENABLED=0) into an image by ociimage.Static, as
// registry.k8s.io/pause cannot be pulled here.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
