package inference

import (
	"time"

	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/schema"
)

// Backend is the serving engine of an endpoint.
type Backend string

// Backends.
const (
	BackendTriton Backend = "triton"
	BackendVLLM   Backend = "vllm"
)

// EndpointSpec is what a user declares for an inference endpoint. Zero
// values mean "the default" (see WithDefaults); the JSON names are the
// paths Validate reports problems at.
type EndpointSpec struct {
	Backend Backend `json:"backend"`
	Model   Model   `json:"model"`
	// Image is the serving container image, e.g.
	// "nvcr.io/nvidia/tritonserver:25.04-py3" or "vllm/vllm-openai:v0.9.1".
	Image string `json:"image"`
	// Args are appended to the backend's default arguments (DefaultArgs),
	// so a later flag overrides an earlier one where the engine allows it.
	// Flags that Atelier's probes, Service and metrics rely on are
	// rejected (ReservedArgs).
	Args []string `json:"args,omitempty"`
	// Env is ordered as Kubernetes orders it ($(VAR) expansion sees only
	// earlier entries), so order is part of the revision's digest.
	Env []EnvVar `json:"env,omitempty"`
	// Secrets are project secrets the replicas get as environment
	// variables, named here and never valued: the worker resolves them
	// when it starts a replica, so a value is in neither the spec, the
	// revision, Temporal history nor REST. Changing which secrets a
	// revision names rolls out; changing a secret's value does not (roll
	// the endpoint back to its own revision to restart it). On a cluster
	// the values are in a Secret of each revision's.
	Secrets   []SecretEnv `json:"secrets,omitempty"`
	Resources Resources   `json:"resources"`
	// Pod holds Kubernetes pod settings of the replicas (node selector,
	// tolerations, service account, volumes, ...: schema.Pod), under the
	// cluster operator's defaults and policy. Part of what replicas run:
	// changing it rolls out. Ignored on the local runtime.
	Pod         *schema.Pod     `json:"pod,omitempty"`
	Replicas    ReplicaRange    `json:"replicas"`
	Autoscaling Autoscaling     `json:"autoscaling"`
	Rollout     RolloutSettings `json:"rollout"`
}

// Model says what the engine serves. Triton needs both: URI is the model
// repository and Name the model loaded from it. vLLM needs at least one:
// it serves URI (a path or hub ID) when set, else Name, and answers to
// Name ("served model name") when both are set.
//
// Ref serves a version of the project's model registry instead of URI:
// "<model>@<alias>", "<model>@<version>" or "<model>" (its latest). The
// version it names when a revision is made is recorded in Registered
// (set by Atelier, never by the user), so a revision serves one exact
// version and rolling back to it serves that version again. The worker
// puts the version's bytes where the engine reads them (Located). With
// Follow (Ref must name an alias), moving the alias makes a new revision
// serving the version it now names, rolled out as any new revision is.
type Model struct {
	URI        string           `json:"uri,omitempty"`
	Name       string           `json:"name,omitempty"`
	Ref        string           `json:"ref,omitempty"`
	Follow     bool             `json:"follow,omitempty"`
	Registered *RegisteredModel `json:"registered,omitempty"`
}

// RegisteredModel is the registry version a revision serves: the
// artifact's digest (what the replicas load) and where it came from.
type RegisteredModel struct {
	Model   string `json:"model"`
	Version int    `json:"version"`
	// Alias is the alias Ref named, "" when Ref named a version.
	Alias      string `json:"alias,omitempty"`
	ArtifactID string `json:"artifactId"`
	Digest     string `json:"digest"`
	Size       int64  `json:"size"`
	// Files is how many files a directory holds; 0 for a file.
	Files int `json:"files,omitempty"`
	// Run and Step produced the artifact (lineage back to its inputs).
	Run  string `json:"run,omitempty"`
	Step string `json:"step,omitempty"`
}

// Served is the model name clients send and the readiness check looks for
// in vLLM's /v1/models: Name, else the registered model's name for a Ref,
// else URI.
func (m Model) Served() string {
	if m.Name != "" {
		return m.Name
	}
	if m.Ref != "" {
		return schema.SplitModelRef(m.Ref).Model
	}
	return m.URI
}

// Located is m served from uri, where the worker placed a registered
// version's bytes: the engine loads uri and answers to Served().
func (m Model) Located(uri string) Model {
	m.Name, m.URI = m.Served(), uri
	return m
}

// SecretEnv gives the replicas the project's secret Name as the
// environment variable Env.
type SecretEnv struct {
	Name string `json:"name"`
	Env  string `json:"env"`
}

// EnvVar is one environment variable of the serving container.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Resources is what one replica requests. GPUs are whole units of GPUType:
// a GPU product (node label nvidia.com/gpu.product) or a MIG profile, the
// same names the gpu package's quotas count. CPU and Memory use Kubernetes
// quantity syntax and are optional.
type Resources struct {
	GPUType gpu.Resource `json:"gpuType,omitempty"`
	GPUs    int          `json:"gpus,omitempty"`
	CPU     string       `json:"cpu,omitempty"`
	Memory  string       `json:"memory,omitempty"`
}

// ReplicaRange bounds the autoscaler. Min is a pointer because 0 is a real
// choice (scale to zero, which needs Autoscaling.IdleTimeout) and must not
// be confused with "not set" (1).
type ReplicaRange struct {
	Min *int `json:"min,omitempty"`
	Max int  `json:"max,omitempty"`
}

// MinReplicas is Min, or DefaultMinReplicas when unset.
func (r ReplicaRange) MinReplicas() int {
	if r.Min == nil {
		return DefaultMinReplicas
	}
	return *r.Min
}

// Autoscaling configures the Autoscaler (see the package documentation for
// the rules these feed).
type Autoscaling struct {
	// TargetQueuePerReplica is the number of requests (executing plus
	// waiting, as the backend reports them) one replica should hold on
	// average.
	TargetQueuePerReplica float64 `json:"targetQueuePerReplica,omitempty"`
	// StableWindow is the averaging window of normal operation.
	StableWindow schema.Duration `json:"stableWindow,omitempty"`
	// PanicWindow is the short window that detects bursts.
	PanicWindow schema.Duration `json:"panicWindow,omitempty"`
	// PanicThreshold is a ratio: panic starts when the panic window asks
	// for at least PanicThreshold × the ready replicas (2 = 200%).
	PanicThreshold float64 `json:"panicThreshold,omitempty"`
	// ScaleDownDelay: a scale-down takes the highest figure wanted during
	// this long, so a short dip does not unload a model that takes minutes
	// to load again. A pointer because "0s" (scale down at once, Knative's
	// default) must differ from unset (DefaultScaleDownDelay).
	ScaleDownDelay *schema.Duration `json:"scaleDownDelay,omitempty"`
	// IdleTimeout is how long demand must be known to be zero before the
	// endpoint scales to zero; 0 disables scale to zero (and then
	// Replicas.Min must be at least 1).
	IdleTimeout schema.Duration `json:"idleTimeout,omitempty"`
}

// Strategy is how a new revision replaces the stable one.
type Strategy string

// Strategies.
const (
	// StrategyRolling replaces replicas in MaxSurge / MaxUnavailable
	// batches; traffic follows ready replicas.
	StrategyRolling Strategy = "rolling"
	// StrategyCanary shifts traffic weights in steps, pausing and gating
	// between steps, then replaces the rest in rolling batches.
	StrategyCanary Strategy = "canary"
	// StrategyBlueGreen starts a full preview at 0% traffic, gates it,
	// then switches all traffic at once on Promote.
	StrategyBlueGreen Strategy = "blueGreen"
)

// RolloutSettings configures rollouts of the endpoint's revisions. The new
// revision's settings govern its own rollout.
type RolloutSettings struct {
	Strategy Strategy `json:"strategy,omitempty"`
	// MaxSurge is how many replicas above the target a rolling phase may
	// add; MaxUnavailable how many below the target may be unready. Both
	// are replica counts, not percentages (GPU replicas are few and
	// expensive, so counts are what users reason in).
	MaxSurge       *int `json:"maxSurge,omitempty"`
	MaxUnavailable *int `json:"maxUnavailable,omitempty"`
	// SurgeFree: never run more replicas than the target, so a rollout
	// needs no GPU quota headroom. Rolling then replaces replica by
	// replica with MaxUnavailable > 0; canary steps take their replicas
	// from the stable revision; blue-green is impossible.
	SurgeFree bool             `json:"surgeFree,omitempty"`
	Canary    CanarySettings   `json:"canary,omitempty"`
	BlueGreen BlueGreen        `json:"blueGreen,omitempty"`
	Gates     GateSettings     `json:"gates,omitempty"`
	Startup   StartupDeadlines `json:"startupDeadlines,omitempty"`
}

// CanarySettings lists the canary's traffic steps.
type CanarySettings struct {
	Steps []CanaryStep `json:"steps,omitempty"`
}

// CanaryStep sends Weight percent of traffic to the new revision, then
// waits Pause before the gates decide whether to go on. Weights must
// increase from step to step.
type CanaryStep struct {
	Weight int             `json:"weight"`
	Pause  schema.Duration `json:"pause,omitempty"`
}

// BlueGreen configures the preview. With AutoPromoteAfter 0 the preview
// waits for a manual Promote; otherwise it is promoted once it has been
// ready with passing gates for that long.
type BlueGreen struct {
	AutoPromoteAfter schema.Duration `json:"autoPromoteAfter,omitempty"`
}

// OnInsufficient is what a rollout does when its gates stayed short of
// samples for GateSettings.MaxInsufficient.
type OnInsufficient string

// Reactions to a lasting lack of samples.
const (
	InsufficientPause OnInsufficient = "pause"
	InsufficientFail  OnInsufficient = "fail"
)

// GateSettings are the health gates' thresholds.
type GateSettings struct {
	// MaxErrorRate is a fraction in (0, 1]; 1 disables the gate.
	MaxErrorRate float64 `json:"maxErrorRate,omitempty"`
	// MaxP99LatencyMs bounds the p99 latency; 0 disables the gate.
	MaxP99LatencyMs float64 `json:"maxP99LatencyMs,omitempty"`
	// MinSamples is the number of requests the error-rate and latency
	// gates need before they may pass or fail.
	MinSamples int `json:"minSamples,omitempty"`
	// AnalysisInterval is how often the gates are evaluated while a step
	// waits.
	AnalysisInterval schema.Duration `json:"analysisInterval,omitempty"`
	// MaxInsufficient is how long a gate may lack samples once a verdict
	// is due before OnInsufficient applies.
	MaxInsufficient schema.Duration `json:"maxInsufficient,omitempty"`
	OnInsufficient  OnInsufficient  `json:"onInsufficient,omitempty"`
	// SyntheticProbes: when samples are short, steps ask the caller for
	// the missing number of probe requests to the new revision (Step.Probes).
	SyntheticProbes bool `json:"syntheticProbes,omitempty"`
}

// StartupDeadlines bound each startup phase of a replica, each measured
// from the end of the previous phase: Scheduled from creation (waiting for
// a GPU node), ImagePulled from scheduling (multi-GB images), EngineReady
// from the pull (loading weights). Separate budgets let the workflow set
// one durable timer per phase and say which phase is stuck.
type StartupDeadlines struct {
	Scheduled   schema.Duration `json:"scheduled,omitempty"`
	ImagePulled schema.Duration `json:"imagePulled,omitempty"`
	EngineReady schema.Duration `json:"engineReady,omitempty"`
}

// Total is the sum of the three budgets: the longest a replica may take
// from creation to ready.
func (d StartupDeadlines) Total() time.Duration {
	return d.Scheduled.D() + d.ImagePulled.D() + d.EngineReady.D()
}
