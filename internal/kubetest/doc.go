// Package kubetest gives tests a real Kubernetes API server — kube-apiserver
// v1.35.4 on etcd v3.6.6 — with the real KubeRay and Spark-operator CRDs
// installed, shared by every test in a test binary.
//
// No controllers run: there is no kube-controller-manager, scheduler, kubelet,
// KubeRay or Spark operator. Objects are stored, defaulted and validated
// exactly as in a real cluster (CRD OpenAPI schemas, CEL rules, status
// subresources), and then nothing happens to them. A test plays the operator
// itself by writing .status through the status subresource (UpdateStatus or a
// patch with subresource "status"), which is precisely the surface Atelier's
// Kubernetes code reads. A batch/v1 Job or a Pod likewise just sits there.
//
// Starting the server takes a few seconds, so a test binary starts at most
// one, lazily, on the first Start call. Use Main in TestMain so it is stopped
// cleanly after the tests:
//
//	func TestMain(m *testing.M) { kubetest.Main(m) }
//
//	func TestSubmit(t *testing.T) {
//		c := kubetest.Start(t)
//		ns := c.Namespace(t)
//		ray := rayclient.NewForConfigOrDie(c.RESTConfig())
//		...
//	}
//
// Without Main the processes are still killed when the test binary exits
// (they are started with a parent-death signal on Linux), just less politely.
//
// Tests isolate themselves by namespace (Namespace): the CRDs and other
// cluster-scoped objects are shared. Namespaces are deleted when their test
// ends, but with no namespace controller running they stay Terminating until
// the server stops; that is harmless because every test gets a fresh name.
//
// The binaries come from, in order: $ATELIER_KUBE_BIN_DIR (a directory with
// kube-apiserver and etcd); the cache ~/.cache/atelier/kube-v1.35.4/ (honouring
// ATELIER_CACHE_DIR and XDG_CACHE_HOME); else tools/kube/build.sh builds them
// from source into that cache — 6 to 11 minutes on 2 cores the first time,
// with progress on stderr, and under a lock so parallel test binaries build
// once. The CRD manifests are read from the module cache, at the KubeRay and
// Spark-operator versions the main go.mod requires, so upgrading those
// modules upgrades the CRDs the tests run against.
//
// A first build can outlast go test's default 10-minute -timeout, so CI (or
// a fresh checkout) should run tools/kube/build.sh before `go test ./...`,
// as for the other cached tools.
//
// With -short, Start skips the calling test, so `go test -short ./...` runs
// only unit tests and never builds Kubernetes.
package kubetest
