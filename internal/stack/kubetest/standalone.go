package kubetest

// StartCluster starts a cluster for a program that is not a test binary (a
// benchmark, a tool), exactly as Start does for tests: same binaries, same
// CRDs. Unlike Start it is not shared and never skips: every call starts a
// new cluster, and the caller must Stop it. log receives progress (nil:
// stderr). Run it from inside the Atelier repository (or set
// ATELIER_KUBE_BIN_DIR), as for tests.
func StartCluster(log func(format string, args ...any)) (*Cluster, error) {
	if log == nil {
		log = progress
	}
	return start(log, false)
}

// StartControlPlaneCluster is StartCluster for a cluster with a control
// plane, as StartControlPlane starts for tests.
func StartControlPlaneCluster(log func(format string, args ...any)) (*Cluster, error) {
	if log == nil {
		log = progress
	}
	return start(log, true)
}
