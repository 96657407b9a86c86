// Package kube is Atelier's Kubernetes compute backend: the activities that
// run steps on a cluster as Kubernetes objects and wait for them.
//
// A Backend (New) serves one cluster; Register registers its activities
// under the contract names of package activities:
//
//   - RunKubeStep (activities.RunKubeStepName) runs one attempt of a step
//     as a batch/v1 Job (container steps), a KubeRay RayJob (ray steps) or
//     a SparkApplication (spark steps), and waits for it.
//   - EnsureRayCluster (activities.EnsureRayClusterName) creates or adopts
//     a run's shared RayCluster and waits until it is ready.
//   - CleanupRunObjects (activities.CleanupRunObjectsName) deletes
//     everything a run created on the cluster.
//
// The package is laid out like Kueue's job integrations: package framework
// holds what every kind shares (names, labels, create-or-adopt, shared
// informers, error classification, outputs, and framework.Typed, the
// generic Create/Get/Update/Delete/List/Watch over a kind's typed client),
// and each integration is a small package under jobs/ implementing
// framework.Kind for one kind (job, rayjob, sparkapp; raycluster for
// shared clusters) and exporting a framework.Integration. Integrations is
// the one list of them: adding a kind is a package plus a line there (and,
// for a new spec kind, a case in activities.KubeKindFor). Long-lived kinds,
// which are changed rather than run (an inference endpoint's Deployments,
// Service, HTTPRoute), embed framework.Typed too and are written with
// framework.Apply (create, or merge-and-update with conflict retries):
// package serving holds them.
//
// The step loop's timers (attempt timeout, image-pull grace, heartbeats,
// output polling) and its timestamps run on the clock given by WithClock
// (k8s.io/utils/clock), so tests move a fake clock instead of sleeping.
//
// # Objects, names and labels
//
// Each attempt's object lives in the project's namespace (default
// "atelier-{project}", created if missing) under a deterministic name:
// "<step>[-i<item>]-a<attempt>-<10 hex of sha256(run, step, item,
// attempt)>", a DNS-1035 label of at most 63 characters (47 for RayJobs:
// KubeRay derives "<rayjob>-<5 random>" RayCluster names, at most 53). A
// run's shared RayCluster is "<cluster>-<10 hex of sha256(run, cluster)>".
// Every object carries atelier.dev/managed-by=atelier, atelier.dev/project,
// atelier.dev/run, atelier.dev/step, atelier.dev/item (forEach items only)
// and atelier.dev/attempt (values made valid label values), and so do its
// pods.
//
// Creation is idempotent: Create, and on AlreadyExists adopt the existing
// object only if its labels say it is the same run/step/item/attempt;
// anything else of that name is left alone and the step fails as
// InvalidStep. A Temporal retry of an activity whose worker was killed -9
// therefore never makes a second object. The waiting activity heartbeats
// {namespace, name, uid} every second (WithHeartbeatInterval), and a retry
// resumes from those details.
//
// # Waiting: one watch per kind
//
// Completion is observed by watch, not polling. The backend runs one
// shared informer per kind (RayJob, RayCluster, SparkApplication, Job, and
// Pod for Job pods), started on first use, filtered on the server by the
// label atelier.dev/managed-by=atelier. Each waiting activity subscribes to
// its object's key; the informer's event handler pokes the subscribers of
// that key, which then read the object from the informer's cache. A
// thousand concurrent steps thus cost one watch per kind on the API server
// instead of a thousand, and a status change reaches its step within
// milliseconds (bench/kubewatch measures it).
//
// The informers watch all namespaces, with the label selector, rather than
// one informer per project namespace: a worker serves every project, so
// per-namespace informers would grow with the number of active projects
// (each with its own watch and initial list, and lifecycle bookkeeping to
// stop idle ones), while the label selector already limits a cluster-wide
// watch to Atelier's objects. It needs cluster-scoped list/watch
// permission on those kinds; a worker that creates namespaces needs
// cluster-scoped rights anyway. When the namespace template has no
// "{project}" (every project shares one namespace), the informers watch
// only that namespace, and namespaced RBAC suffices.
//
// # Outputs
//
// One mechanism for every kind: the step writes a JSON object to
// $ATELIER_OUTPUTS, which is /dev/termination-log, and the kubelet copies
// that file into the pod's status (containerStatuses[].state.terminated.
// message) when the container exits. On success the backend reads it from
// the step's output pod: the Job's pod, the Spark driver pod, or the
// RayJob's submitter pod (KubeRay's submitter Job, named like the RayJob).
// No pod or an empty message means no outputs; anything but a JSON object
// fails the step as BadOutputs. The pods are listed from the API server's
// watch cache at a resourceVersion no older than the terminal status just
// seen (the operator saw the pod end before it wrote that status), which
// spares every finishing step a consistent read through etcd. Kubernetes
// truncates termination messages
// at 4 KiB per container: larger results belong in files, with their
// paths as outputs.
//
// For ray steps the entrypoint runs on the Ray head (as the job's driver),
// not in the submitter pod. The contract stays the same for the step's
// author; jobs/rayjob/outputs.go carries the file across: the entrypoint is
// wrapped so that, when it exits, it prints $ATELIER_OUTPUTS (a per-job
// file on the head) as one marker line into the job's log, and the
// submitter runs KubeRay's own K8sJobMode command (status, submit
// --no-wait, follow the logs) with the followed log tee'd and the last
// marker written to its termination message. The step's $ATELIER_METRICS
// travels the same way, as a marker line printed before the outputs and
// written as the message's first line (framework.MetricsMarker; dropped,
// saying so in the log, when both would pass the 4 KiB). Both wrappers are
// executed by the tests (with a fake ray CLI); they have not run against a
// live KubeRay here.
//
// # Logs
//
// With WithLogSink (the cluster worker passes the catalogue), the log of
// a step's output container is stored like a local attempt's (up to 8
// MiB, the attempt's secrets redacted line by line), so the gateway
// serves it through REST, `atelier logs -f` and the web UI, after the pod
// and its node are gone (argo-workflows#1005). A Job's container (not a
// wide step's item: a stream per item would be thousands of connections)
// is followed from the API server (pods/log, follow) while it runs and
// stored as it comes, at most a second late (follower.go); the lines a
// cancelled or timed-out step printed stay. The Spark driver's and the
// RayJob submitter's logs (their pods are not watched) are copied when
// the step ends. When an attempt ends, its log is read once more and
// what the follower did not store (a stream that broke, a follower that
// started late) is appended; a follower or copy that starts again (its
// activity retried on another worker) skips what the catalogue holds. A
// node that serves no logs (kwok's) only costs a quick 404.
//
// # Failures, timeouts and cancellation
//
// Step outcomes are non-retryable application errors with the
// KubeStepResult as details: StepFailed "<Kind> <name> failed: <reason>:
// <message>" with the operator's reason (BackoffLimitExceeded, AppFailed,
// SUBMISSION_FAILED, ...), followed by how the output container ended when
// it failed ("; container step exited with code 3", or with the runtime's
// reason and message: "(StartError: ... executable file not found in
// $PATH)", "(OOMKilled)"); StepTimeout; BadOutputs; InvalidStep for a
// request that cannot run, or whose object the API server rejects (422
// Invalid, 400, 403 from admission): the message is the server's, and names
// the field. Network errors, 5xx and 429 are plain, retryable errors.
//
// A pod stuck in ErrImagePull, ImagePullBackOff or
// CreateContainerConfigError for longer than the image-pull grace (default
// 5m) fails the step with that reason; ErrImageNeverPull (the image is not
// on the node and imagePullPolicy is Never) and InvalidImageName fail it at
// once, since nothing can change them.
//
// On cancellation, and when the attempt's timeout elapses (counted from the
// object's creation), the object is deleted with foreground propagation;
// the activity then waits a few seconds at most for it to disappear (an
// object with a deletionTimestamp is being deleted, which is enough) and
// returns. When the worker shuts down, objects are left running and the
// activity returns a retryable error, so that a retry on another worker
// resumes waiting.
//
// # Artifacts
//
// A container step's artifacts move in its pod, by the step launcher
// (launch.go, package launch), with URLs the gateway signs for the one
// attempt. A ray step's move through the staging store (staging.go,
// package staging): the worker copies the inputs there before creating
// the RayJob, names the attempt's URIs in its environment, and stores the
// outputs the job wrote there by content once it succeeded. Neither kind
// of pod holds the artifact store's credentials.
//
// # Client configuration
//
// Per step the backend makes a handful of requests: a namespace check (once
// per namespace and backend), a create, and a pod list (from the watch
// cache) when the step finishes; waiting costs nothing. client-go's default limits (5 QPS,
// burst 10) would make a burst of a thousand finishing steps queue for
// minutes on the client side; give the worker's rest.Config QPS ≥ 50 and
// Burst ≥ 100 (more if many steps start or finish together), and size the
// API server's priority and fairness for it. The informers' watches are
// long-running requests and do not count against the client's QPS.
//
// # RBAC
//
// The worker's identity needs: namespaces get, create; jobs.batch, rayjobs
// and rayclusters.ray.io, sparkapplications.sparkoperator.k8s.io create,
// get, list, watch, delete; pods get, list, watch; with a log sink, pods/log
// get and nodes get.
package kube
