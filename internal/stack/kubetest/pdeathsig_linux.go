package kubetest

import "syscall"

// parentDeathSignal makes the kernel SIGKILL a server when the test binary
// dies (killed by -timeout, or SIGKILL), so no kube-apiserver or etcd is
// orphaned holding ports and memory. Because the servers run in their own
// process group they would otherwise survive. startProcess keeps the forking
// thread alive for as long as the child, which this signal is tied to.
func parentDeathSignal(a *syscall.SysProcAttr) {
	a.Pdeathsig = syscall.SIGKILL
}
