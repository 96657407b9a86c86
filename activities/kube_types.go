package activities

import (
	"strings"
	"time"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Activity names of the Kubernetes backends. A worker serving cluster C
// polls TaskQueueForCluster(C) and registers all of them.
const (
	RunKubeStepName       = "atelier.k8s.step.run"
	EnsureRayClusterName  = "atelier.k8s.raycluster.ensure"
	CleanupRunObjectsName = "atelier.k8s.cleanup"
	// SelectClusterName runs on the pipeline's own task queue: it reads the
	// cluster registry (Postgres) and picks a cluster for a step.
	SelectClusterName = "atelier.cluster.select"
	// SelectClustersName chooses clusters for several steps (the items of
	// a forEach) with one read of the registry.
	SelectClustersName = "atelier.cluster.select-batch"
)

// TaskQueueForCluster is the task queue of the worker(s) serving a cluster.
func TaskQueueForCluster(cluster string) string { return clusterQueuePrefix + cluster }

const clusterQueuePrefix = "atelier-k8s-"

// IsClusterTaskQueue reports whether q is a cluster's queue
// (TaskQueueForCluster) rather than a local worker's.
func IsClusterTaskQueue(q string) bool { return strings.HasPrefix(q, clusterQueuePrefix) }

// ControlTaskQueue is the queue of a worker's bookkeeping activities (the
// Postgres mirror, cluster selection, cleanup) next to its step queue q.
// Its own pollers and slots mean a tenant whose steps fill every step slot
// cannot stall other runs' bookkeeping.
func ControlTaskQueue(q string) string { return q + "-control" }

// ControlConcurrency is how many control activities a worker runs at once.
// They are short (a Postgres write, a registry read, a few deletes).
const ControlConcurrency = 64

// KubeKind names the Kubernetes object a step becomes.
type KubeKind string

// Kubernetes step kinds.
const (
	KubeJob      KubeKind = "job"      // batch/v1 Job (container steps)
	KubeRayJob   KubeKind = "rayjob"   // ray.io/v1 RayJob
	KubeSparkApp KubeKind = "sparkapp" // sparkoperator.k8s.io/v1beta2 SparkApplication
)

// KubeKindFor is the Kubernetes kind a step of spec kind k becomes on a
// cluster (false for kinds that do not run as a Kubernetes object). The
// workflows ask it; the backend's registry (kube.Integrations) implements
// each kind.
func KubeKindFor(k pipeline.StepKind) (KubeKind, bool) {
	switch k {
	case pipeline.KindContainer:
		return KubeJob, true
	case pipeline.KindRay:
		return KubeRayJob, true
	case pipeline.KindSpark:
		return KubeSparkApp, true
	}
	return "", false
}

// KubeStepRequest runs one attempt of a step as a Kubernetes object. Exactly
// one of Container, Ray, Spark is set (matching Kind), already rendered.
type KubeStepRequest struct {
	Project string   `json:"project"`
	RunID   string   `json:"runId"`
	Step    string   `json:"step"`
	Item    *int     `json:"item,omitempty"`
	Attempt int      `json:"attempt"`
	Kind    KubeKind `json:"kind"`
	// Timeout bounds the attempt (0 = none); on expiry the object is deleted
	// and the step fails with ErrTypeStepTimeout.
	Timeout time.Duration `json:"timeout"`
	// DeleteAfter, when positive, has Kubernetes delete a Job this long
	// after it finished (ttlSecondsAfterFinished), set once a worker has
	// read its outcome: the items of a wide step, whose Jobs would
	// otherwise pile up until the run's end (100,000 Jobs and their pods,
	// and a sweep far longer than its bound). A Job that finished while no
	// worker watched stays until the retry adopts it; the grace is for a
	// retry after the outcome was read but not recorded. Other kinds
	// ignore it.
	DeleteAfter time.Duration `json:"deleteAfter,omitempty"`

	Container *pipeline.Container `json:"container,omitempty"`
	// Inputs are the container's input artifacts (references), placed at
	// $ATELIER_INPUTS/<Name> by the launcher; Outputs the artifacts it
	// stores from $ATELIER_ARTIFACTS once the command succeeded.
	Inputs  []runstate.Artifact       `json:"inputs,omitempty"`
	Outputs []pipeline.ArtifactOutput `json:"outputs,omitempty"`
	// Metrics: the step declared metrics (pipeline.Step.Metrics, or a Go
	// pipeline's WithMetrics), so a container runs under the launcher,
	// which stores its $ATELIER_METRICS file for the worker to read, as
	// it does for a container with artifacts. Other kinds ignore it.
	Metrics bool                `json:"metrics,omitempty"`
	Ray     *pipeline.RayStep   `json:"ray,omitempty"`
	Spark   *pipeline.SparkStep `json:"spark,omitempty"`
	// RayClusterName is the Kubernetes name of the run's shared RayCluster
	// when Ray.Cluster is set (from EnsureRayCluster).
	RayClusterName string `json:"rayClusterName,omitempty"`
	// RayClusterImage is that cluster's image: the RayJob's submitter pod
	// runs it (it has the ray CLI).
	RayClusterImage string `json:"rayClusterImage,omitempty"`
	// Nodes are the nodes GPU admission chose for the step's gang: its
	// GPU pods are required to run on them (none: no admission ran).
	Nodes []string `json:"nodes,omitempty"`
}

// KubeStepResult is what a finished Kubernetes attempt reports; on failure
// it is the application error's details.
type KubeStepResult struct {
	ContainerResult
	Namespace string `json:"namespace"`
	Object    string `json:"object"` // "<kind>/<name>"
	// Links: "dashboard" (Ray), "sparkUI", "logs" (kubectl logs command).
	Links map[string]string `json:"links,omitempty"`
}

// EnsureRayClusterRequest creates (or adopts) a run's shared RayCluster and
// waits until it is ready.
type EnsureRayClusterRequest struct {
	Project string                    `json:"project"`
	RunID   string                    `json:"runId"`
	Cluster pipeline.SharedRayCluster `json:"cluster"`
	// Nodes are the nodes GPU admission chose for the cluster's GPU pods.
	Nodes []string `json:"nodes,omitempty"`
}

// EnsureRayClusterResult names the ready cluster.
type EnsureRayClusterResult struct {
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Links     map[string]string `json:"links,omitempty"`
}

// CleanupRunObjectsRequest deletes every object a run created on a cluster
// (foreground propagation) and waits, bounded, until they are gone.
type CleanupRunObjectsRequest struct {
	Project string `json:"project"`
	RunID   string `json:"runId"`
}

// CleanupRunObjectsResult counts what was deleted.
type CleanupRunObjectsResult struct {
	// Deleted names the objects deleted ("<kind>/<name>", sorted), at most
	// MaxListedDeleted of them: a run's wide step may leave thousands, and
	// the result is recorded in the run's history (2 MB per payload).
	Deleted []string `json:"deleted,omitempty"`
	// More counts the objects deleted beyond those listed.
	More int `json:"more,omitempty"`
}

// MaxListedDeleted bounds CleanupRunObjectsResult.Deleted.
const MaxListedDeleted = 100

// SelectClusterRequest asks for a cluster for one step.
type SelectClusterRequest struct {
	Project   string              `json:"project"`
	Step      string              `json:"step"`
	Placement *pipeline.Placement `json:"placement,omitempty"`
	// GPUs and GPUType are what the step needs, for capacity-based choice.
	GPUs    int    `json:"gpus,omitempty"`
	GPUType string `json:"gpuType,omitempty"`
}

// SelectClusterResult is the chosen cluster.
type SelectClusterResult struct {
	Cluster   string `json:"cluster"`
	TaskQueue string `json:"taskQueue"`
	Reason    string `json:"reason"` // why this one, shown on the step
}

// SelectClustersRequest asks for a cluster for each request.
type SelectClustersRequest struct {
	Requests []SelectClusterRequest `json:"requests"`
}

// SelectClustersResult answers each request of a SelectClustersRequest,
// in order.
type SelectClustersResult struct {
	Results []SelectClusterOutcome `json:"results"`
}

// SelectClusterOutcome is one request's answer: a cluster, or why none
// matches (the ErrTypeNoCluster message).
type SelectClusterOutcome struct {
	SelectClusterResult
	NoCluster string `json:"noCluster,omitempty"`
}

// ErrTypeNoCluster is returned by SelectCluster when nothing matches.
const ErrTypeNoCluster = "NoCluster"
