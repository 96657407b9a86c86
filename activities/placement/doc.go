// Package placement is the runtime side of Atelier's cluster registry:
// which Kubernetes cluster a step runs on (Choose, the Selector activity),
// and how much a cluster has free (MeasureCapacity, reported by each
// cluster's worker). "Cluster" elsewhere means a registry entry
// (catalog.Cluster) or a shared RayCluster (activities/kube).
//
// There is no central store of kubeconfigs. Every Kubernetes cluster runs
// its own worker (`atelier worker --cluster NAME`), which holds that
// cluster's credentials, polls activities.TaskQueueForCluster(NAME), and
// registers the cluster in the Postgres registry and reports its capacity
// every 30 s (MeasureCapacity). A pipeline's workflow runs on its own task
// queue and asks the Selector activity (activities.SelectClusterName,
// registered on the local worker next to the workflows) where each
// Kubernetes step should go, then schedules the step's activities on the
// chosen cluster's task queue.
//
// # Choosing a cluster
//
// Choose is the whole decision, as a pure function of the registry, the
// request and the time; the activity only reads the registry and wraps
// Choose's errors for Temporal:
//
//   - Placement.Cluster names the cluster; an unknown name fails.
//   - Otherwise the candidates are the clusters whose labels include every
//     Placement.Selector pair (all clusters without a selector).
//   - Candidates whose worker has not reported within
//     catalog.ClusterOnlineWindow are skipped when any other candidate is
//     online: a step sent to a dead worker's queue would only wait.
//   - For a step that needs GPUs, candidates that do not have that many GPUs
//     of the type at all are skipped when another candidate has: such a
//     cluster could only run the step after its autoscaler adds nodes.
//   - Strategy "first" takes the lowest name; "most-free-gpus" (the
//     default) the most free GPUs of the requested type (all types summed
//     when the step names none), then the most free CPU, then the lowest
//     name, so the choice is deterministic.
//
// The result's Reason says why, including what was skipped. When nothing
// matches, the error is non-retryable (activities.ErrTypeNoCluster) and
// names what was asked: retrying cannot register a cluster.
package placement
