// Command sweep-node restores the host after a real Kubernetes node of the
// tests (kubetest.RealNode) whose test binary was killed before it could
// stop it: it waits for the machine-wide lock (so it never touches a live
// node), then kills the node's leftover pods and shims, unmounts, deletes
// its iptables chains, bridge and node IP, and restores the sysctls it
// changed. The next real node start does the same. `make clean-node` runs
// it; it needs root.
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

func main() {
	before := kubetest.RealNodeTraces()
	if len(before) == 0 {
		fmt.Println("sweep-node: no real node traces on this host")
		return
	}
	if err := kubetest.SweepRealNode(time.Minute, func(f string, a ...any) { fmt.Printf(f+"\n", a...) }); err != nil {
		fmt.Fprintln(os.Stderr, "sweep-node:", err)
		os.Exit(1)
	}
	if left := kubetest.RealNodeTraces(); len(left) > 0 {
		fmt.Fprintln(os.Stderr, "sweep-node: still on the host:", strings.Join(left, "; "))
		os.Exit(1)
	}
}
