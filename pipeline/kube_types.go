package pipeline

import "github.com/atelier-ml/atelier/schema"

// Resources requests compute for a container, a Ray head/worker group, or a
// Spark driver/executor. Quantities use Kubernetes syntax ("500m", "4Gi").
type Resources struct {
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
	// GPU is the number of nvidia.com/gpu per pod (or per executor).
	GPU int `json:"gpu,omitempty"`
	// GPUType selects nodes by the nvidia.com/gpu.product label
	// (e.g. "NVIDIA-A100-SXM4-80GB"); empty means any GPU.
	GPUType string `json:"gpuType,omitempty"`
}

// Placement chooses the Kubernetes cluster a step runs on. Cluster excludes
// Selector and Strategy; Strategy may accompany Selector (it orders the
// matching clusters). No placement (on a step and on the pipeline) means:
// container steps run on the local runtime, ray/spark steps on the
// registered cluster with the most free capacity.
type Placement struct {
	// Cluster names a registered cluster explicitly.
	Cluster string `json:"cluster,omitempty"`
	// Selector picks among clusters whose labels match all of these.
	Selector map[string]string `json:"selector,omitempty"`
	// Strategy is "most-free-gpus" (default when choosing) or "first".
	Strategy string `json:"strategy,omitempty"`
}

// Placement strategies.
const (
	StrategyMostFreeGPUs = "most-free-gpus"
	StrategyFirst        = "first"
)

// RayStep runs a Ray job: a KubeRay RayJob with its own RayCluster, or,
// with Cluster set, a RayJob submitted to one of the run's shared
// RayClusters (Pipeline.RayClusters).
type RayStep struct {
	// Entrypoint is the command Ray runs (templated), e.g.
	// "python train.py --lr {{ params.lr }}".
	Entrypoint string `json:"entrypoint"`
	// RuntimeEnv is Ray's runtime_env (pip, env_vars, working_dir, ...).
	RuntimeEnv map[string]any `json:"runtimeEnv,omitempty"`
	// Secrets are project secrets the job's pods get, as environment
	// variables or files, named here and never valued (as container.secrets):
	// every pod of the job's own RayCluster (head and workers) and its
	// submitter reads them from the attempt's Kubernetes Secret, and the
	// entrypoint, a Ray driver started on the cluster, inherits them with
	// the environment of the node it runs on. Not with Cluster: a shared
	// cluster's pods are the run's, not the step's.
	Secrets []SecretEnv `json:"secrets,omitempty"`
	// Cluster names a shared RayCluster of this run; the cluster fields
	// below must then be empty.
	Cluster string `json:"cluster,omitempty"`
	RayClusterTemplate
	// ShutdownAfterJobFinishes deletes the job's RayCluster when it ends
	// (default true; ignored with Cluster).
	ShutdownAfterJobFinishes *bool `json:"shutdownAfterJobFinishes,omitempty"`
	// TTLSecondsAfterFinished keeps the finished RayJob (and cluster) this
	// long for inspection before KubeRay deletes it.
	TTLSecondsAfterFinished int32 `json:"ttlSecondsAfterFinished,omitempty"`
	// ActiveDeadlineSeconds makes KubeRay stop the job after this long.
	ActiveDeadlineSeconds int32 `json:"activeDeadlineSeconds,omitempty"`
	// Artifacts are files and directories the job reads and writes
	// through the project's object store, declared as a container's
	// (artifacts.go). A Ray job's pods do not get them as files: the
	// cluster worker copies the inputs under a prefix of the
	// installation's staging store, named by $ATELIER_INPUTS_URI
	// (<uri>/<name>), and stores what the job wrote under
	// $ATELIER_ARTIFACTS_URI/<path> once it succeeded: URIs such as
	// s3://bucket/prefix, which Ray Train's storage_path and the pods'
	// own cloud identity read and write.
	Artifacts *Artifacts `json:"artifacts,omitempty"`
}

// RayClusterTemplate describes a RayCluster: image, head and worker groups.
type RayClusterTemplate struct {
	Image      string           `json:"image,omitempty"`
	RayVersion string           `json:"rayVersion,omitempty"`
	Head       Resources        `json:"head,omitempty"`
	Workers    []RayWorkerGroup `json:"workers,omitempty"`
	// Pod holds Kubernetes pod settings of every pod of the cluster (head
	// and workers) and of the step's job submitter; HeadPod and a worker
	// group's Pod override them for the head and that group. The
	// pipeline's pod settings (Spec.Pod) are the default of all three.
	Pod     *schema.Pod `json:"pod,omitempty"`
	HeadPod *schema.Pod `json:"headPod,omitempty"`
}

// RayWorkerGroup is one Ray worker group.
type RayWorkerGroup struct {
	Name        string `json:"name"`
	Replicas    int32  `json:"replicas"`
	MinReplicas int32  `json:"minReplicas,omitempty"`
	MaxReplicas int32  `json:"maxReplicas,omitempty"`
	Resources
	// Pod holds pod settings of this group's pods, over the cluster's.
	Pod *schema.Pod `json:"pod,omitempty"`
}

// SharedRayCluster is a RayCluster created once per run, used by the ray
// steps that name it, and deleted when the run ends however it ends.
type SharedRayCluster struct {
	Name string `json:"name"`
	RayClusterTemplate
	Placement *Placement `json:"placement,omitempty"`
}

// SparkStep runs a SparkApplication (spark-operator v1beta2).
type SparkStep struct {
	// Type is Python, Scala, Java or R.
	Type                string            `json:"type"`
	Image               string            `json:"image"`
	SparkVersion        string            `json:"sparkVersion,omitempty"`
	MainClass           string            `json:"mainClass,omitempty"`
	MainApplicationFile string            `json:"mainApplicationFile"`
	Arguments           []string          `json:"arguments,omitempty"`
	SparkConf           map[string]string `json:"sparkConf,omitempty"`
	Driver              SparkRole         `json:"driver,omitempty"`
	Executor            SparkRole         `json:"executor,omitempty"`
	// Secrets are project secrets the driver and the executors get, as
	// environment variables or files, named here and never valued (as
	// container.secrets), from the attempt's Kubernetes Secret.
	Secrets []SecretEnv `json:"secrets,omitempty"`
	// Pod holds Kubernetes pod settings of the driver and the executors
	// (a role's own Pod overrides them); the pipeline's pod settings are
	// their default. They reach the pods through the SparkApplication's
	// pod templates.
	Pod *schema.Pod `json:"pod,omitempty"`
	// Artifacts are as a ray job's (RayStep.Artifacts): the driver and
	// the executors get $ATELIER_INPUTS_URI and $ATELIER_ARTIFACTS_URI in
	// the staging store (s3a:// if the operator names it so).
	Artifacts *Artifacts `json:"artifacts,omitempty"`
}

// SparkRole sizes the Spark driver or executors.
type SparkRole struct {
	Cores     int32  `json:"cores,omitempty"`
	Memory    string `json:"memory,omitempty"`
	Instances int32  `json:"instances,omitempty"` // executors only
	GPU       int    `json:"gpu,omitempty"`
	GPUType   string `json:"gpuType,omitempty"`
	// Pod holds pod settings of this role's pods, over the step's.
	Pod *schema.Pod `json:"pod,omitempty"`
}
