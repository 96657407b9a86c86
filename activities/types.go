package activities

import (
	"time"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Registered activity names. They are part of workflow histories: never
// rename one without a workflow.GetVersion guard.
const (
	RunContainerName = "atelier.container.run"
	MirrorRunName    = "atelier.run.mirror"
)

// Application error types returned by step activities. Step failures are
// non-retryable at the Temporal level: the pipeline workflow owns step
// retries so every attempt is visible in the run.
const (
	ErrTypeStepFailed  = "StepFailed"  // process exited non-zero
	ErrTypeStepTimeout = "StepTimeout" // attempt exceeded its timeout
	ErrTypeInvalidStep = "InvalidStep" // request cannot run (bad command, missing tool)
	ErrTypeBadOutputs  = "BadOutputs"  // outputs file not a JSON object or too large
	// ErrTypeRolloutFailed: an inference step's revision was rolled back
	// (or its endpoint deleted) instead of being promoted. Deploying the
	// same spec again would only meet the same revision, so the step is
	// not retried.
	ErrTypeRolloutFailed = "RolloutFailed"
)

// ContainerRequest runs one attempt of a container step.
type ContainerRequest struct {
	Project string `json:"project"`
	RunID   string `json:"runId"`
	Step    string `json:"step"`           // step name
	Item    *int   `json:"item,omitempty"` // forEach item index
	Attempt int    `json:"attempt"`        // 1-based, as shown to users

	Image      string            `json:"image,omitempty"`
	Command    []string          `json:"command"`
	Args       []string          `json:"args,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	WorkingDir string            `json:"workingDir,omitempty"`
	Timeout    time.Duration     `json:"timeout"`
	// GPU is how many of the machine's GPUs the step gets (its
	// CUDA_VISIBLE_DEVICES); GPUType restricts them to one product,
	// spelled as the nvidia.com/gpu.product label. A step with GPU 0 sees
	// no GPU on a machine that has some.
	GPU     int    `json:"gpu,omitempty"`
	GPUType string `json:"gpuType,omitempty"`
	// Secrets name the project secrets the process gets as environment
	// variables; the worker resolves their values when it starts the
	// process (never carried here).
	Secrets []pipeline.SecretEnv `json:"secrets,omitempty"`
	// Inputs are the artifacts placed at $ATELIER_INPUTS/<Name> before
	// the process starts; Outputs those stored from $ATELIER_ARTIFACTS
	// once it succeeded (references only: the bytes are in the project's
	// artifact store).
	Inputs  []runstate.Artifact       `json:"inputs,omitempty"`
	Outputs []pipeline.ArtifactOutput `json:"outputs,omitempty"`
}

// ContainerResult is what a finished attempt reports. On failure it is
// attached as the application error's details.
type ContainerResult struct {
	ExitCode int            `json:"exitCode"`
	Outputs  map[string]any `json:"outputs,omitempty"`
	// Artifacts are the stored output artifacts, in the request's order.
	Artifacts  []runstate.Artifact `json:"artifacts,omitempty"`
	StartedAt  time.Time           `json:"startedAt"`
	FinishedAt time.Time           `json:"finishedAt"`
	// Execution is which execution of the attempt's command this result
	// is from (ATELIER_EXECUTION on the local runtime): 2 or more when the
	// runtime lost the process and ran the command again. 0: unknown.
	Execution int `json:"execution,omitempty"`
	// Metrics are what the step reported in its metrics file
	// (ATELIER_METRICS; the local runtime reads it).
	Metrics *runstate.Metrics `json:"metrics,omitempty"`
}

// LogKey addresses the log of one step attempt.
type LogKey struct {
	RunID   string
	Step    string
	Item    int // -1 when not a forEach item
	Attempt int
}

// ResolveArtifactsName resolves a step's catalogue inputs (an artifact ID,
// a registered model's version) to references, as a local activity run
// before the step (package activities/lineage). Steps without such inputs
// never run it.
const ResolveArtifactsName = "atelier.artifacts.resolve"

// ResolveArtifactsRequest names a step's catalogue inputs, in order.
type ResolveArtifactsRequest struct {
	Project string                   `json:"project"`
	Inputs  []pipeline.ArtifactInput `json:"inputs"`
}

// ImportArtifactsName imports a step's inputs named by a URI into the
// project's artifact store, before the step (package activities/imports,
// on the step queue: a transfer of any size, heartbeating). Steps without
// such inputs never run it.
const ImportArtifactsName = "atelier.artifacts.import"

// ImportArtifactsRequest names a step's (item's) URI inputs, rendered, in
// order.
type ImportArtifactsRequest struct {
	Project string                   `json:"project"`
	RunID   string                   `json:"runId"`
	Step    string                   `json:"step"`
	Item    *int                     `json:"item,omitempty"`
	Inputs  []pipeline.ArtifactInput `json:"inputs"`
}

// ResolveArtifactsResult is each input's artifact (Name is the input's,
// From says what named it), or Problem: why one cannot be read (unknown
// artifact, model, alias or version), which fails the step.
type ResolveArtifactsResult struct {
	Artifacts []runstate.Artifact `json:"artifacts,omitempty"`
	Problem   string              `json:"problem,omitempty"`
}
