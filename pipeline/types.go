package pipeline

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"time"

	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/schema"
)

// Pipeline is a declarative DAG pipeline as posted over REST (JSON or YAML).
// Stored versions are immutable; the generic pipeline workflow receives the
// whole Pipeline in its input so replay never depends on the catalogue.
type Spec struct {
	// Name is informational; the catalogue name comes from the URL.
	Name        string  `json:"name,omitempty"`
	Description string  `json:"description,omitempty"`
	Params      []Param `json:"params,omitempty"`
	Steps       []Step  `json:"steps"`
	// Deadline bounds the whole run; when it passes, running steps are
	// cancelled and the run fails.
	Deadline schema.Duration `json:"deadline,omitempty"`
	// Placement is the default cluster choice for the steps.
	Placement *Placement `json:"placement,omitempty"`
	// Pod is the default Kubernetes pod settings of the steps placed on a
	// cluster (container, ray and spark) and of the shared Ray clusters;
	// a step's own settings override it field by field (MergePod,
	// ApplyPodDefaults). An inference step's endpoint has its own
	// (spec.pod).
	Pod *schema.Pod `json:"pod,omitempty"`
	// RayClusters are long-lived RayClusters shared by ray steps of a run.
	RayClusters []SharedRayCluster `json:"rayClusters,omitempty"`
	// OnExit are exit handlers: steps that run once every step of Steps
	// has ended, whatever the outcome (success, failure, cancel, deadline),
	// before the run reports its final state. They may depend on each
	// other, not on Steps (those have all ended); their templates may read
	// the outputs of Steps that succeeded and run.state, run.failedSteps
	// and run.error. See onexit.go.
	OnExit []Step `json:"onExit,omitempty"`
	// OnExitTimeout bounds the exit handlers as a whole (default
	// DefaultOnExitTimeout); the pipeline deadline does not apply to them.
	OnExitTimeout schema.Duration `json:"onExitTimeout,omitempty"`
	// Cache is the default step caching of the pipeline's container, ray
	// and spark steps (see Cache); a step's own cache block overrides it.
	Cache *Cache `json:"cache,omitempty"`
	// Outputs are what a run of the pipeline outputs once it succeeds:
	// its result in REST, and the outputs of a step of another pipeline
	// that runs this one as a child (kind pipeline). Each value is a
	// template over params, steps.<name>.outputs and run, evaluated when
	// every step is done; a value that is exactly one "{{ expr }}" keeps
	// the expression's type (a number stays a number), any other is
	// rendered as a string.
	Outputs map[string]string `json:"outputs,omitempty"`
	// Artifacts are the output artifacts of its steps that a run of the
	// pipeline exports once it succeeds: a step of another pipeline that
	// runs this one as a child (kind pipeline) carries them under these
	// names, and that pipeline's steps read them with
	// from: "<pipelineStep>.<name>" as they read a container step's
	// (artifacts.go, ArtifactExport).
	Artifacts []ArtifactExport `json:"artifacts,omitempty"`
}

// ParamType is the declared type of a pipeline parameter.
type ParamType string

// Parameter types. Values are JSON values; "number" accepts any JSON number,
// "integer" only whole numbers.
const (
	ParamString  ParamType = "string"
	ParamInteger ParamType = "integer"
	ParamNumber  ParamType = "number"
	ParamBoolean ParamType = "boolean"
	ParamObject  ParamType = "object"
	ParamArray   ParamType = "array"
)

// Param declares a typed pipeline parameter. A param without a default is
// required when a run starts.
type Param struct {
	Name        string    `json:"name"`
	Type        ParamType `json:"type"`
	Default     any       `json:"default,omitempty"`
	Description string    `json:"description,omitempty"`
}

// StepKind names what a step runs.
type StepKind string

// Step kinds. container, approval and pipeline run on every runtime; ray
// and spark need a Kubernetes cluster; inference needs a runtime that
// serves endpoints.
const (
	KindContainer StepKind = "container"
	KindRay       StepKind = "ray"
	KindSpark     StepKind = "spark"
	KindInference StepKind = "inference"
	KindApproval  StepKind = "approval"
	// KindPromote moves a registered model's alias (PromoteStep).
	KindPromote  StepKind = "promote"
	KindPipeline StepKind = "pipeline"
)

// Step is one node of the DAG.
//
// Strings in Container (command, args, env values, workingDir), Ray
// (entrypoint, runtimeEnv string values), Spark (mainApplicationFile,
// arguments, sparkConf values), Inference (endpoint and every string of
// spec), Approval (message) and Pipeline (params) may hold templates: "{{ <expr> }}" where
// <expr> is an expr-lang expression over params, steps.<name>.outputs, item
// (inside forEach) and run (id, project, pipeline). A step that references
// steps.X implicitly depends on X.
type Step struct {
	Name      string   `json:"name"`
	Kind      StepKind `json:"kind,omitempty"` // default container
	DependsOn []string `json:"dependsOn,omitempty"`
	// RunIf is the step's trigger rule: which final states of its
	// dependencies let it run (default RunIfAllSucceeded). See RunIf.
	RunIf RunIf `json:"runIf,omitempty"`
	// ContinueOn "failed" makes the step's failure handled: it stays
	// FAILED, and its dependents' trigger rules see it so, but it neither
	// fails the run nor stops the other steps (Argo's continueOn).
	ContinueOn ContinueOn `json:"continueOn,omitempty"`
	// When is an expr-lang boolean expression (no "{{ }}"); false skips the
	// step and, transitively, the steps that depend on it.
	When    string   `json:"when,omitempty"`
	ForEach *ForEach `json:"forEach,omitempty"`
	Retries *Retries `json:"retries,omitempty"`
	// Timeout bounds one attempt; for an approval step, the wait for a
	// decision (none when unset).
	Timeout   schema.Duration `json:"timeout,omitempty"`
	Container *Container      `json:"container,omitempty"`
	Ray       *RayStep        `json:"ray,omitempty"`
	Spark     *SparkStep      `json:"spark,omitempty"`
	// Inference deploys or updates an inference endpoint.
	Inference *InferenceStep `json:"inference,omitempty"`
	// Approval configures an approval step (optional: every field has a
	// default). Its Timeout is how long it waits for a decision.
	Approval *ApprovalStep `json:"approval,omitempty"`
	// Pipeline runs another stored pipeline of the run's project as a
	// child run (kind pipeline). Its Timeout bounds each child run.
	Pipeline *ChildStep `json:"pipeline,omitempty"`
	// Promote points a registered model's alias at a version (kind
	// promote).
	Promote *PromoteStep `json:"promote,omitempty"`
	// Placement chooses the cluster (overrides the pipeline's).
	Placement *Placement `json:"placement,omitempty"`
	// Cache reuses the outputs of an earlier identical execution of the
	// step's work (container, ray and spark steps; see Cache).
	Cache *Cache `json:"cache,omitempty"`
	// Metrics declares the goal of metrics the step reports (its
	// $ATELIER_METRICS file): whether a higher or a lower value is the
	// better one when runs are compared. Undeclared metrics: maximize.
	Metrics map[string]MetricGoal `json:"metrics,omitempty"`
}

// Cache configures step caching across runs: before a step (or each
// forEach item) runs, its rendered work is hashed into a key (what the key
// covers: docs/api.md "Step caching"); a successful execution with the
// same key in the same project, younger than TTL, is reused instead of
// running anything (the step shows CACHED with the run, step and attempt
// it came from). Only successful attempts are stored.
//
// A cache block turns caching on unless it says enabled: false. On a step
// it overrides the pipeline's block field by field: its enabled (written
// or implied) wins, its version and ttl when set.
type Cache struct {
	// Enabled turns caching on or off (default true where a block is
	// written).
	Enabled *bool `json:"enabled,omitempty"`
	// Version is part of the key: change it to invalidate what the key
	// cannot see (code baked into an image tag that moved, data read from
	// a fixed path, a fixed bug).
	Version string `json:"version,omitempty"`
	// TTL bounds the age of an entry that may be reused (0: no bound).
	TTL schema.Duration `json:"ttl,omitempty"`
}

// MaxCacheVersionLen bounds Cache.Version.
const MaxCacheVersionLen = 128

// EffectiveCache is the caching that applies to step s of p, or nil when
// it is off: the step's block merged over the pipeline's (see Cache).
// Kinds that cannot be cached (approval, inference, pipeline) get nil even
// with a pipeline default. The result is a new value.
func (s *Step) EffectiveCache(p *Spec) *Cache {
	switch s.Kind {
	case "", KindContainer, KindRay, KindSpark:
	default:
		return nil
	}
	var def *Cache
	if p != nil {
		def = p.Cache
	}
	if s.Cache == nil && def == nil {
		return nil
	}
	out := Cache{}
	on := true
	if def != nil {
		out.Version, out.TTL = def.Version, def.TTL
		if def.Enabled != nil {
			on = *def.Enabled
		}
	}
	if c := s.Cache; c != nil {
		on = c.Enabled == nil || *c.Enabled
		if c.Version != "" {
			out.Version = c.Version
		}
		if c.TTL > 0 {
			out.TTL = c.TTL
		}
	}
	if !on {
		return nil
	}
	t := true
	out.Enabled = &t
	return &out
}

// RunIf is a trigger rule (Airflow's trigger_rule, Argo's depends): it
// decides from the final states of a step's direct dependencies whether
// the step runs or is SKIPPED. CACHED counts as SUCCEEDED. CANCELLED
// counts as neither succeeded nor failed: it fails allSucceeded and
// noneFailed and never makes anyFailed true. A step with no dependencies
// meets every rule except anyFailed.
type RunIf string

// Trigger rules.
const (
	// RunIfAllSucceeded (the default): every dependency SUCCEEDED (or was
	// CACHED). A dependency skipped by its own when skips the step too.
	RunIfAllSucceeded RunIf = "allSucceeded"
	// RunIfNoneFailed: every dependency SUCCEEDED, was CACHED or SKIPPED;
	// the join of a diamond one of whose branches may be skipped.
	RunIfNoneFailed RunIf = "noneFailed"
	// RunIfAllDone: every dependency finished, whatever its state; a
	// cleanup step. It runs even after a step of the run failed.
	RunIfAllDone RunIf = "allDone"
	// RunIfAnyFailed: at least one dependency FAILED; a step that reacts
	// to a failure (notify, roll back). It runs even after a step of the
	// run failed.
	RunIfAnyFailed RunIf = "anyFailed"
)

// ContinueOn names the outcomes of a step that do not fail its run.
type ContinueOn string

// ContinueOnFailed: a FAILED step does not fail the run. Its dependents
// decide by their runIf as for any failed dependency (allSucceeded and
// noneFailed ones are SKIPPED, anyFailed and allDone ones run); the run
// ends SUCCEEDED if nothing else failed, with a warning naming the step.
const ContinueOnFailed ContinueOn = "failed"

// RunIfs lists the trigger rules in the order documentation shows them.
var RunIfs = []RunIf{RunIfAllSucceeded, RunIfNoneFailed, RunIfAllDone, RunIfAnyFailed}

// OrDefault is r, or RunIfAllSucceeded when r is empty.
func (r RunIf) OrDefault() RunIf {
	if r == "" {
		return RunIfAllSucceeded
	}
	return r
}

// RunsAfterFailure reports whether a step with rule r still starts once a
// step of the run has failed. Others never start then (the run fails
// fast): they end SKIPPED.
func (r RunIf) RunsAfterFailure() bool {
	return r == RunIfAllDone || r == RunIfAnyFailed
}

// ApprovalOutcome is what an approval's timeout decides.
type ApprovalOutcome string

// Approval outcomes on timeout.
const (
	ApprovalApprove ApprovalOutcome = "approve"
	ApprovalReject  ApprovalOutcome = "reject"
)

// ApprovalStep waits for a person to approve or reject (REST
// .../steps/{step}/approve or /reject). Approved, the step succeeds with
// outputs {approved: true, approver, comment}; rejected, it fails. The
// step's timeout, when set, ends the wait with OnTimeout; without one it
// waits until decided, cancelled or past the pipeline deadline.
type ApprovalStep struct {
	// Message is shown to approvers in the step's status. It may hold
	// templates ("accuracy {{ steps.eval.outputs.accuracy }}"), rendered
	// when the step starts.
	Message string `json:"message,omitempty"`
	// MinRole is the least token role that may decide: viewer, editor
	// (the default) or admin. Mutually exclusive with Approvers.
	MinRole string `json:"minRole,omitempty"`
	// Approvers lists the token roles that may decide, when not a
	// MinRole and everything above it (e.g. [admin]).
	Approvers []string `json:"approvers,omitempty"`
	// CommentRequired refuses a decision without a comment.
	CommentRequired bool `json:"commentRequired,omitempty"`
	// OnTimeout is the decision taken when the step's timeout passes:
	// approve or reject (the default).
	OnTimeout ApprovalOutcome `json:"onTimeout,omitempty"`
}

// DefaultApprovalRole is who may decide an approval without minRole or
// approvers: editors and admins, the roles that may start and cancel runs.
const DefaultApprovalRole = "editor"

// DeciderRoles are the roles that may decide the approval a: its
// Approvers, else MinRole (default editor) and every role above it.
func (a *ApprovalStep) DeciderRoles() []string {
	if a != nil && len(a.Approvers) > 0 {
		return append([]string(nil), a.Approvers...)
	}
	least := DefaultApprovalRole
	if a != nil && a.MinRole != "" {
		least = a.MinRole
	}
	var out []string
	for _, r := range tokens.Roles {
		if tokens.Rank(r) >= tokens.Rank(least) {
			out = append(out, r)
		}
	}
	return out
}

// InferenceStep deploys an inference endpoint of the run's project, or
// updates it when it exists, and waits for the rollout of the revision
// that results: the step succeeds when that revision is promoted (outputs
// {"endpoint": name, "revision": N}) and fails, without retrying, when it
// is rolled back. A spec equal to the endpoint's latest makes no revision
// and succeeds at once with the latest's number once it serves.
type InferenceStep struct {
	// Endpoint names the endpoint in the run's project (templatable).
	Endpoint string `json:"endpoint"`
	// Cluster is the registered cluster the endpoint runs on when this
	// step creates it; "" means the local runtime, where it serves
	// endpoints (ValidateOptions.LocalEndpoints). An existing endpoint
	// stays where it runs: moving one means deleting it first. Not
	// templatable, and the step's placement does not apply (an endpoint
	// outlives the run, so where it lives is written down, not chosen by
	// free capacity).
	Cluster string `json:"cluster,omitempty"`
	// Spec is the endpoint's spec. Every string in it (model, image,
	// args, env values, ...) may hold templates, such as
	// "{{ steps.train.outputs.model }}"; the spec is checked again once
	// rendered.
	Spec inference.EndpointSpec `json:"spec"`
}

// PipelineStep runs a stored pipeline of the same project as a child run
// (its own run in REST, linked to the parent run and step): the step
// succeeds when the child run succeeds, with the child pipeline's Outputs
// as its outputs and the artifacts it exports (Spec.Artifacts) as its
// artifacts, and fails when it fails. Cancelling the parent cancels
// the child, which runs its cleanup and ends CANCELLED. The child inherits
// the parent's project, gpuPriority and deadline (the smaller of its own
// deadline, what is left of the parent's and the step's timeout). Child
// runs nest at most MaxPipelineDepth levels below the run a user started.
type ChildStep struct {
	// Name is the stored pipeline, in the run's project (never another
	// project's). Not templatable: it is checked when the spec is stored.
	Name string `json:"name"`
	// Version pins a version; 0 (absent) means the newest version when
	// the step starts, which the attempt records (childRun.version).
	Version int `json:"version,omitempty"`
	// Params are the child run's params, checked against the child
	// pipeline's declared params (defaults fill the others). A string may
	// hold templates; one that is exactly "{{ expr }}" passes the
	// expression's value with its type ("{{ params.lr }}" stays a number).
	Params map[string]any `json:"params,omitempty"`
}

// MaxPipelineDepth is how many levels of child runs (pipeline steps) may
// nest below the run a user started: pipelines that run each other in a
// cycle stop there with a clear error instead of recursing forever.
const MaxPipelineDepth = 5

// ForEach fans a step out over a list. Items is either a JSON array literal
// or an expr-lang expression (a string) that evaluates to an array.
//
// Up to WideThreshold items run inside the pipeline workflow, one entry per
// item in the run status; a longer list makes the step "wide": its items run
// in batch child workflows and their states and outputs live in Postgres
// (see docs/architecture.md, "Wide forEach").
type ForEach struct {
	Items       json.RawMessage `json:"items"`
	Parallelism int             `json:"parallelism,omitempty"` // 0 = DefaultParallelism
	// When is a per-item condition (Argo's when inside a loop): a bare
	// boolean expression with item in scope, evaluated for each item
	// before its templates; false makes that item SKIPPED with null
	// outputs, keeping every other item at its index.
	When string `json:"when,omitempty"`
	// FailurePolicy decides what a failed item does to the step (nil:
	// failFast with no failure tolerated, the behaviour from before it).
	FailurePolicy *FailurePolicy `json:"failurePolicy,omitempty"`
}

// FailurePolicy is how many failed items a forEach step tolerates and
// whether it stops early (Flyte's min_success_ratio, as a percentage of
// failures).
type FailurePolicy struct {
	// Mode is FailFast (default: stop starting items once more than
	// MaxFailedPercent of them failed) or Continue (run every item, decide
	// at the end).
	Mode FailureMode `json:"mode,omitempty"`
	// MaxFailedPercent is the share of items (0..100) that may fail with
	// the step still SUCCEEDED; failed items then have null outputs.
	MaxFailedPercent float64 `json:"maxFailedPercent,omitempty"`
}

// FailureMode says whether a forEach stops early on failures.
type FailureMode string

// Failure modes.
const (
	FailFast FailureMode = "failFast"
	Continue FailureMode = "continue"
)

// Tolerated is how many of n items may fail with the step still
// succeeding (nil policy: none).
func (p *FailurePolicy) Tolerated(n int) int {
	if p == nil || p.MaxFailedPercent <= 0 {
		return 0
	}
	return int(math.Floor(float64(n) * p.MaxFailedPercent / 100))
}

// StopsEarly reports whether new items stop once more than Tolerated
// failed (failFast, the default).
func (p *FailurePolicy) StopsEarly() bool {
	return p == nil || p.Mode != Continue
}

// Limits that keep one run inside Temporal's history and pending-activity
// limits (see docs/architecture.md).
const (
	// MaxSteps bounds a pipeline's steps: the history estimate
	// (EstimateHistoryEvents) fits 1,000 single-attempt steps in about
	// 6,000 events, and the status of 1,000 steps stays far under the
	// 1 MiB the query and mirror carry.
	MaxSteps = 1000
	// WideThreshold is the most items a forEach runs inside the pipeline
	// workflow; more make it wide (batch child workflows).
	WideThreshold = 1000
	// MaxForEachItems bounds a forEach's items, wide or not.
	MaxForEachItems = 100_000
	// DefaultParallelism is the items in flight when parallelism is 0.
	DefaultParallelism = 100
	// MaxParallelism bounds forEach.parallelism: a wide step spreads it
	// over several batch workflows, each far under Temporal's 2,000
	// pending activities.
	MaxParallelism     = 1000
	MaxRetries         = 20
	MaxSpecBytes       = 256 << 10
	MaxOutputsBytes    = 64 << 10
	DefaultStepTimeout = 24 * time.Hour
)

// Retries re-runs a failed attempt. Backoff doubles (Factor) up to MaxBackoff.
type Retries struct {
	Limit      int             `json:"limit"`
	Backoff    schema.Duration `json:"backoff,omitempty"`    // default 1s
	MaxBackoff schema.Duration `json:"maxBackoff,omitempty"` // default 5m
	Factor     float64         `json:"factor,omitempty"`     // default 2
}

// Container describes a process: a Kubernetes Job on a cluster, a local
// process on the local runtime (Image is then only recorded).
type Container struct {
	Image      string            `json:"image,omitempty"`
	Command    []string          `json:"command"`
	Args       []string          `json:"args,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	WorkingDir string            `json:"workingDir,omitempty"`
	// Resources apply on Kubernetes; the local runtime honours only gpu
	// and gpuType (the step gets that many of the machine's GPUs through
	// CUDA_VISIBLE_DEVICES, waiting while they are taken).
	Resources *Resources `json:"resources,omitempty"`
	// Secrets are project secrets the step gets as environment variables
	// or files, named here and never valued: the worker resolves them just
	// before the process starts (on Kubernetes, into a Secret of the
	// attempt's), so a value is in neither the spec, Temporal history nor
	// the catalogue, and it is redacted from the step's log and outputs.
	// Ray and spark steps take them too (RayStep.Secrets,
	// SparkStep.Secrets).
	Secrets []SecretEnv `json:"secrets,omitempty"`
	// Pod holds Kubernetes pod settings (schema.Pod); a step placed on a
	// cluster only.
	Pod *schema.Pod `json:"pod,omitempty"`
	// Artifacts are files and directories the step reads and writes
	// through the project's object store (artifacts.go).
	Artifacts *Artifacts `json:"artifacts,omitempty"`
}

// SecretEnv gives a step the project's secret Name as the environment
// variable Env, or as the file $ATELIER_SECRETS/<File> (readable by the
// step only; for tools that read credentials from a file): exactly one.
type SecretEnv struct {
	Name string `json:"name"`
	Env  string `json:"env,omitempty"`
	File string `json:"file,omitempty"`
}

// SecretsDir is where a step placed on Kubernetes finds its secret files
// ($ATELIER_SECRETS); on the local runtime it is a directory of the
// attempt's.
const SecretsDir = "/var/run/atelier/secrets"

var secretFileRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

// MetricGoal says which value of a metric is the best.
type MetricGoal string

// Metric goals.
const (
	Maximize MetricGoal = "maximize"
	Minimize MetricGoal = "minimize"
)

// MaxMetricNameLen bounds a metric's name.
const MaxMetricNameLen = 64

var metricNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// MetricNameProblem says what is wrong with a metric's name ("" when
// nothing): the one rule for a metrics file and a step's declared goals.
func MetricNameProblem(name string) string {
	if len(name) > MaxMetricNameLen || !metricNameRE.MatchString(name) {
		return fmt.Sprintf("invalid name: use letters, digits, '_', '.' and '-', starting with a letter or '_', at most %d characters", MaxMetricNameLen)
	}
	return ""
}
