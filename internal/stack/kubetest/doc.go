// Package kubetest gives tests a real Kubernetes cluster, shared by every
// test in a test binary, in one of two kinds:
//
//   - Start: a bare API server — kube-apiserver v1.35.4 on etcd v3.6.6 with
//     the real KubeRay and Spark-operator CRDs — and nothing else. Objects
//     are stored, defaulted and validated exactly as in a real cluster (CRD
//     OpenAPI schemas, CEL rules, status subresources), and then nothing
//     happens to them: the test plays the controllers by writing .status
//     (UpdateStatus, or Operator). For tests that need to put an object in
//     one precise state after another.
//   - StartControlPlane: the same plus a control plane — kube-controller-
//     manager (Deployments, ReplicaSets, Jobs, CronJobs, StatefulSets, HPA,
//     garbage collector, namespace deletion, ...), kube-scheduler, kwok
//     v0.7.0 playing kubelet for fake nodes, and the KubeRay operator v1.6.0
//     — so objects behave as they do on a cluster: Jobs make pods, the
//     scheduler fits them to nodes' resources, taints and selectors (or
//     says why not), KubeRay turns RayClusters into head/worker pods and
//     RayJobs into clusters and submitter Jobs, deletions cascade.
//
// A test binary runs one kind (asking for the other fails the test): keep
// tests of each kind in their own package.
//
// # Nodes and pods (kwok)
//
// A control-plane cluster starts with no nodes. Tests create fake nodes with
// MakeNode (e.g. MakeNode("gpu-1").GPUs(H100, 8).Obj()), MixedGPUNodes and
// CreateNodes (1,000 nodes in seconds); kwok manages every node annotated
// kwok.x-k8s.io/node=fake and reports it Ready. A pod bound to such a node
// becomes Running and Ready at once, and its containers exit only as its
// annotations say (see AnnotationExitCode, AnnotationRunFor,
// AnnotationTerminationMessage; the stages are in kwok-stages.yaml). Pods
// that controllers create for Atelier's steps get those annotations from
// Workloads, which plays the programs in the containers: that is the only
// thing a test decides.
//
// # What is still simulated, and why
//
//   - The Ray head's dashboard: Ray does not run in kwok's pods, so Dashboard
//     serves the job API the KubeRay operator calls (reached through
//     HTTP_PROXY on the operator process; see Dashboard), deriving a Ray
//     job's state from its submitter pod — the submitter follows the job
//     to its end, so its exit is the job's.
//   - The Spark operator: it runs spark-submit inside its own container,
//     which cannot run here; Operator (NewSparkOperator) still plays it by
//     writing SparkApplication status and creating the driver pod (with a
//     scheduler name no scheduler serves, so kwok leaves it to Operator).
//   - Kueue's controller: only its Workload CRD is installed
//     (InstallKueueCRDs, sigs.k8s.io/kueue v0.14.0); a test plays Kueue by
//     writing the Workload (KueueWorkload) and resuming the job. Kueue's
//     manager serves admission webhooks that the API server must call over
//     TLS through a Service, and this control plane has no kube-proxy or
//     pod network to route that.
//   - Gateway API: only its HTTPRoute CRD (InstallGatewayAPICRDs, at the
//     go.mod's sigs.k8s.io/gateway-api version) and no Gateway controller:
//     routes are stored and validated, and nothing routes by them.
//   - The kubelet: kwok, by design. Container images are never pulled (no
//     ErrImagePull), probes never run, resource usage is not metered (HPA
//     has no metrics server to read).
//   - Admission: the ServiceAccount plugin is off (nothing mounts tokens,
//     and it would reject pods created before a namespace's default
//     ServiceAccount exists); authorization is AlwaysAllow and every
//     component uses the admin token.
//
// Starting takes a few seconds (etcd + API server ≈ 3 s, CRDs ≈ 9 s, the
// control plane under 1 s more), so a test binary starts at most one
// cluster, lazily, on the first Start call. Use Main in TestMain so it is
// stopped cleanly after the tests:
//
//	func TestMain(m *testing.M) { kubetest.Main(m) }
//
//	func TestSubmit(t *testing.T) {
//		c := kubetest.StartControlPlane(t)
//		ns := c.Namespace(t)
//		...
//	}
//
// Every process is started with a parent-death signal (Linux), in its own
// process group, logging to <component>.log in the cluster's temp dir
// (Cluster.Dir); a component that fails to become healthy fails the start
// with the tail of its log. Without Main the processes are still killed
// when the test binary exits, just less politely.
//
// Tests isolate themselves by namespace (Namespace): CRDs, nodes and other
// cluster-scoped objects are shared. Namespaces are deleted when their test
// ends (with a control plane, the namespace controller then empties them).
//
// The binaries come from, in order: $ATELIER_KUBE_BIN_DIR (one directory
// with kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kwok
// and ray-operator); the cache ~/.cache/atelier/{kube-v1.35.4,kwok-v0.7.0,
// kuberay-v1.6.0}/ (honouring ATELIER_CACHE_DIR and XDG_CACHE_HOME); else
// tools/kube/build.sh builds them from pinned modules into that cache —
// with progress on stderr, under a lock so parallel test binaries build
// once (README has the build times). The CRD manifests are read from the
// module cache, at the KubeRay and Spark-operator versions the main go.mod
// requires.
//
// A first build outlasts go test's default 10-minute -timeout, so CI (or a
// fresh checkout) runs `make ensure-kube` before `go test ./...`, as `make
// test` does.
//
// With -short, Start skips the calling test, so `go test -short ./...` runs
// only unit tests and never builds Kubernetes.
package kubetest
