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
// # The real node
//
// A control-plane cluster can also get one real node beside kwok's
// (Cluster.RealNode): kubelet v1.35.4, containerd v2.2.9 with runc, CNI
// bridge networking (pods on 10.245.0.0/24, node IP 10.241.0.1 on lo) and
// kube-proxy in iptables mode. Its containers really run: a pod's command,
// arguments, environment and working directory, its termination message
// (where Atelier reads outputs), exit code and log (read through the API
// server), image errors with the kubelet's reasons (ErrImageNeverPull),
// Services reached through kube-proxy's rules. It is registered with the
// label and NoSchedule taint kubetest.atelier/real-node, so only pods that ask
// for it (RealNodePod: node selector and toleration) run there; everything
// else stays on kwok, which keeps serving the many-node and GPU cases.
//
// There is no registry: the node's containerd gets two images at start,
// built in Go by package ociimage (reproducible OCI archives imported with
// ctr): StepImage (busybox: sh and the usual tools) and PauseImage (the pod
// sandbox, a static Go pause). Pods use them with imagePullPolicy: Never.
//
// One real node per machine, not per test binary: two kube-proxies would
// fight over the same iptables chains and two kubelets over host paths
// that no setting moves. A test binary that asks for it takes a
// machine-wide lock (/run/atelier-node.lock; other binaries
// wait, up to 15 min, told who holds it) and joins the node to its own API
// server; it is reference-counted within the binary and stopped when the
// last test using it ends, which also restores the host: its processes,
// pods and shims, mounts, KUBE-* and CNI-* iptables chains, the bridge, the
// node IP, cgroups, host paths (/var/lib/kubelet, /var/log/containers,
// /var/lib/cni, /run/containerd, when it created them) and the sysctls
// kubelet and the bridge change (vm.overcommit_memory, kernel.panic,
// kernel.panic_on_oops, net.ipv4.ip_forward; saved before the start).
// If the test binary dies (SIGKILL, go test -timeout), kubelet, containerd
// and kube-proxy die with it (parent-death signal) but the pods and their
// shims do not: the next start sweeps them, and all the rest, first (`make
// clean-node` does the same by hand). The only trace it leaves is the
// nf_tables tables iptables creates (filter, nat, mangle), emptied.
//
// The node needs root on Linux, runc, the CNI plugins, iptables, conntrack
// and a static busybox (Debian packages, which `make ensure-node`
// installs), and kubelet, kube-proxy and containerd built by
// tools/kube/build.sh node. Where any is missing, RealNode skips the test
// saying what is missing, or fails it when ATELIER_REQUIRE_NODE=1 (CI).
// The node is started in about 2-3 s (containerd and the images 0.5-1 s,
// kubelet to Ready ~1.5 s); a pod runs 1-3 s after its creation.
//
// Known limits of the node on this kind of machine: the host is on cgroup
// v1 (kubelet runs with failCgroupV1: false; cgroup v2 hosts are untested)
// and root lacks CAP_SYS_RESOURCE, so containerd clamps every
// oom_score_adj to its own (restrict_oom_score_adj) and Guaranteed pods get
// 0 rather than -997. There is no cluster DNS (CoreDNS), and pods cannot
// reach what listens on the host's loopback (the API server, the tests'
// Postgres and Temporal) but through ForwardToPods, which opens a TCP
// forwarder on the node's address. The Atelier image (AtelierImage: the
// whole binary and the launcher) is built and imported on demand by
// RealNode.ImportAtelierImage, for the Helm chart's test.
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
//   - The kubelet, on kwok's nodes: kwok, by design. Container images are
//     never pulled (no ErrImagePull), probes never run, resource usage is
//     not metered (HPA has no metrics server to read). The real node runs
//     containers, but only from the images imported at its start; Ray
//     cannot run on it (no Ray image: no registry, no PyPI), so KubeRay's
//     head and worker pods stay on kwok.
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
// and ray-operator; for the real node also kubelet, kube-proxy, containerd,
// containerd-shim-runc-v2 and ctr); the cache ~/.cache/atelier/{kube-v1.35.4,
// kwok-v0.7.0,kuberay-v1.6.0,containerd-v2.2.9}/ (honouring
// ATELIER_CACHE_DIR and XDG_CACHE_HOME); else
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
