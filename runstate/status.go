package runstate

import (
	"strings"
	"time"
)

// RunState is the lifecycle state of a run (one Temporal workflow execution).
type State string

// Run states.
const (
	Pending    State = "PENDING"
	Running    State = "RUNNING"
	Succeeded  State = "SUCCEEDED"
	Failed     State = "FAILED"
	Cancelling State = "CANCELLING"
	Cancelled  State = "CANCELLED"
	// RunTerminated is a run whose workflow was terminated through
	// Temporal (UI, CLI, tctl): it stopped without running its cleanup.
	Terminated State = "TERMINATED"
)

// Terminal reports whether no further change will happen.
func (s State) Terminal() bool {
	return s == Succeeded || s == Failed || s == Cancelled || s == Terminated
}

// StepState is the lifecycle state of one step (or one forEach item).
type StepState string

// Step states. CACHED is a step whose outputs were reused from an earlier
// run (a step cache hit or a retry's reuse; StepStatus.CachedFrom says which).
const (
	StepPending            StepState = "PENDING"
	StepRunning            StepState = "RUNNING"
	StepRetrying           StepState = "RETRYING" // failed attempt, waiting for backoff
	StepSucceeded          StepState = "SUCCEEDED"
	StepFailed             StepState = "FAILED"
	StepSkipped            StepState = "SKIPPED"
	StepCancelled          StepState = "CANCELLED"
	StepCached             StepState = "CACHED"
	StepWaitingForGPU      StepState = "WAITING_FOR_GPU"
	StepWaitingForApproval StepState = "WAITING_FOR_APPROVAL"
)

// Terminal reports whether the step will not change any more.
func (s StepState) Terminal() bool {
	switch s {
	case StepSucceeded, StepFailed, StepSkipped, StepCancelled, StepCached:
		return true
	}
	return false
}

// RunStatus is the whole observable state of a run. It is served by the
// workflow's "status" query and mirrored to Postgres (runs.status) for
// listing and for reads after the workflow is gone.
type Status struct {
	RunID    string `json:"runId"`
	Project  string `json:"project"`
	Pipeline string `json:"pipeline,omitempty"` // declarative pipeline name
	Version  int    `json:"version,omitempty"`  // declarative pipeline version
	Workflow string `json:"workflow"`           // registered Temporal workflow type
	State    State  `json:"state"`
	// Seq increases with every change; the mirror ignores writes whose Seq is
	// not newer than what Postgres holds, so out-of-order writes are harmless.
	Seq        int64          `json:"seq"`
	StartedAt  *time.Time     `json:"startedAt,omitempty"`
	FinishedAt *time.Time     `json:"finishedAt,omitempty"`
	Error      string         `json:"error,omitempty"`
	Cancel     *CancelRequest `json:"cancel,omitempty"`
	Params     map[string]any `json:"params,omitempty"`
	Steps      []StepStatus   `json:"steps"`
	// Result is the JSON result of a native Go pipeline, when it returned
	// one, or the outputs of a declarative pipeline that declares them
	// (pipeline.Spec.Outputs), once it succeeded.
	Result any `json:"result,omitempty"`
	// Warnings are problems that did not change the outcome, e.g. a failed
	// cleanup of Kubernetes objects.
	Warnings []string `json:"warnings,omitempty"`
	// ScheduleID names the schedule that started the run (empty when none).
	ScheduleID string `json:"scheduleId,omitempty"`
	// CreatedBy is, on a run a schedule started, the token that created
	// the schedule (the AtelierCreatedBy search attribute): the catalogue
	// takes it for the run's row, which the gateway did not write.
	CreatedBy string `json:"createdBy,omitempty"`
	// Targets are the steps a run of a subset of its pipeline was started
	// for (with what they need); empty: the whole pipeline.
	Targets []string `json:"targets,omitempty"`
	// RetryOf is the run this one retries (POST …/runs/{id}/retry).
	RetryOf string `json:"retryOf,omitempty"`
	// CacheBypass: the run was started to run its cached steps rather
	// than reuse their entries (which their results then replace).
	CacheBypass bool `json:"cacheBypass,omitempty"`
	// ParentRun and ParentStep name the run and the step (an item as
	// "<step>[<i>]") that started this run as a child (a pipeline step).
	ParentRun  string `json:"parentRun,omitempty"`
	ParentStep string `json:"parentStep,omitempty"`
}

// StepStatus is one step. A forEach step carries one entry per item in Items
// (named "<step>[<i>]"); its own State summarises them. A wide forEach step
// carries Wide instead (its items are in Postgres).
type StepStatus struct {
	Name       string       `json:"name"`
	Kind       string       `json:"kind"`
	State      StepState    `json:"state"`
	StartedAt  *time.Time   `json:"startedAt,omitempty"`
	FinishedAt *time.Time   `json:"finishedAt,omitempty"`
	Attempts   []Attempt    `json:"attempts,omitempty"`
	Outputs    any          `json:"outputs,omitempty"`
	Error      string       `json:"error,omitempty"`
	Message    string       `json:"message,omitempty"` // e.g. why it was skipped
	Item       any          `json:"item,omitempty"`
	Items      []StepStatus `json:"items,omitempty"`
	// Wide is a wide forEach step's progress (more than
	// spec.WideThreshold items): counts instead of Items.
	Wide *WideStatus `json:"wide,omitempty"`
	// Approval is an approval step's request and, once made, its decision.
	Approval *ApprovalStatus `json:"approval,omitempty"`
	// OnExit marks an exit handler: a step that runs once the others have
	// ended, whatever the outcome (pipeline.Spec.OnExit, Run.OnExit).
	OnExit bool `json:"onExit,omitempty"`
	// CacheKey is the step cache key of a step (or item) with caching on.
	CacheKey string `json:"cacheKey,omitempty"`
	// CachedFrom names the run, step (item) and attempt whose outputs a
	// CACHED step reuses: a step cache hit or a retry's reuse.
	CachedFrom *CacheSource `json:"cachedFrom,omitempty"`
	// Artifacts are the artifacts the step (item) wrote, in the order it
	// declared them; a CACHED step's are those of its source.
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// Inputs are the artifacts it read, each with the input name it had.
	Inputs []Artifact `json:"inputs,omitempty"`
	// Metrics are what its succeeded attempt reported (ATELIER_METRICS).
	Metrics *Metrics `json:"metrics,omitempty"`
}

// ApprovalStatus is what an approval step asks and what was decided.
type ApprovalStatus struct {
	Message string `json:"message,omitempty"`
	// Roles are the token roles that may decide.
	Roles           []string `json:"roles"`
	CommentRequired bool     `json:"commentRequired,omitempty"`
	// Deadline is when OnTimeout decides, if nobody did before.
	Deadline  *time.Time `json:"deadline,omitempty"`
	OnTimeout string     `json:"onTimeout,omitempty"`
	// Decision is "approved" or "rejected" once decided.
	Decision ApprovalDecision `json:"decision,omitempty"`
	// Approver and ApproverID name the token that decided (empty when
	// the timeout did); ApproverRole is its role then.
	Approver     string     `json:"approver,omitempty"`
	ApproverID   string     `json:"approverId,omitempty"`
	ApproverRole string     `json:"approverRole,omitempty"`
	Comment      string     `json:"comment,omitempty"`
	DecidedAt    *time.Time `json:"decidedAt,omitempty"`
	TimedOut     bool       `json:"timedOut,omitempty"`
}

// ApprovalDecision is the outcome of an approval step.
type ApprovalDecision string

// Approval decisions.
const (
	ApprovalApproved ApprovalDecision = "approved"
	ApprovalRejected ApprovalDecision = "rejected"
)

// ApprovalRequest is the argument of UpdateApproval: a token's decision
// on a waiting approval step. The gateway fills the token's identity and
// role; the workflow checks them against the step's rule.
type ApprovalRequest struct {
	Step       string `json:"step"`
	Approve    bool   `json:"approve"`
	Comment    string `json:"comment,omitempty"`
	Approver   string `json:"approver"`
	ApproverID string `json:"approverId"`
	Role       string `json:"role"`
}

// Attempt is one try of a step. Logs are served by the gateway at
// /v1/projects/{project}/runs/{run}/steps/{step}/logs?attempt=N[&item=I].
type Attempt struct {
	Number     int        `json:"number"`
	State      StepState  `json:"state"`
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	ExitCode   *int       `json:"exitCode,omitempty"`
	Error      string     `json:"error,omitempty"`
	// LogURL is filled by the gateway (the one owner of its URLs): every
	// attempt's log is in the catalogue (a Kubernetes attempt's stored by
	// the cluster worker; its Links lead to the cluster's own views).
	LogURL string `json:"logUrl,omitempty"`
	// Cluster, Object and Links locate a Kubernetes attempt: the cluster it
	// ran on, "<kind>/<namespace>/<name>", and links such as the Ray
	// dashboard or Spark UI.
	Cluster string            `json:"cluster,omitempty"`
	Object  string            `json:"object,omitempty"`
	Links   map[string]string `json:"links,omitempty"`
	// Message says why a running attempt is not running yet, as its
	// cluster reports it (activities.SignalStepProgress), e.g. the
	// scheduler's "0/10 nodes are available: 10 Insufficient
	// nvidia.com/gpu."; cleared when the attempt succeeds.
	Message string `json:"message,omitempty"`
	// ChildRun is the run a pipeline step's attempt started: its ID and
	// the pipeline version it runs (the newest when the attempt started,
	// unless the step pins one).
	ChildRun *ChildRun `json:"childRun,omitempty"`
	// Execution is set when the runtime ran the attempt's command more
	// than once (a local step whose process was lost with its worker and
	// could not be adopted): the execution the result is from, 2 or more,
	// as the step saw it in ATELIER_EXECUTION.
	Execution int `json:"execution,omitempty"`
}

// ChildRun is the child run of a pipeline step's attempt.
type ChildRun struct {
	RunID    string `json:"runId"`
	Pipeline string `json:"pipeline"`
	Version  int    `json:"version"`
}

// CancelRequest is the payload of the cancel signal sent by the gateway.
type CancelRequest struct {
	Reason    string    `json:"reason"`
	Requester string    `json:"requester"`
	At        time.Time `json:"at"`
}

// Names shared with the gateway and with users of tctl / the temporal CLI.
const (
	// TaskQueueLocal is the task queue of workers running the local runtime.
	TaskQueueLocal = "atelier-local"
	// PipelineWorkflowName is the generic declarative pipeline interpreter.
	PipelineWorkflowName = "atelier.Pipeline"
	// QueryStatus returns RunStatus.
	QueryStatus = "status"
	// SignalCancel carries a CancelRequest.
	SignalCancel = "cancel"
	// UpdateApproval decides a waiting approval step (an ApprovalRequest;
	// the answer is the run's status once the decision is recorded).
	UpdateApproval = "atelier.approval.decide"
	// Search attributes registered on the namespace (all Keyword).
	SAProject  = "AtelierProject"
	SAPipeline = "AtelierPipeline"
	SAState    = "AtelierState"
	// SACreatedBy is the name of the API token that started the run (or
	// created the schedule that did); unset on runs started with the
	// Temporal SDK directly.
	SACreatedBy = "AtelierCreatedBy"
	// SASchedule is the name of the Atelier schedule that started the run.
	SASchedule = "AtelierSchedule"
)

// EndedOutside records in s that the run's workflow ended without running
// its own end (terminated, timed out, or gone from Temporal): the run takes
// state with reason as its error and every step still in flight is
// CANCELLED with that reason. The catalogue's reconciler uses it; the
// workflow never does.
func (s *Status) EndedOutside(state State, reason string, at time.Time) {
	s.State = state
	if state != Succeeded && reason != "" {
		s.Error = reason
	}
	if !at.IsZero() {
		s.FinishedAt = &at
	}
	for i := range s.Steps {
		MarkUnfinished(&s.Steps[i], StepCancelled, "run ended outside Atelier: "+reason)
	}
	s.Seq++
}

// CacheSource says which execution produced a reused result: the run, the
// step (and forEach item) and the attempt.
type CacheSource struct {
	Run     string `json:"run"`
	Step    string `json:"step"`
	Item    *int   `json:"item,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// At is when the entry was stored (absent for a retry's reuse).
	At *time.Time `json:"at,omitempty"`
}

// Clone is a deep copy of st, safe to hand out while the run goes on.
func (st *StepStatus) Clone() StepStatus {
	c := *st
	c.Attempts = append([]Attempt(nil), st.Attempts...)
	if st.Approval != nil {
		a := *st.Approval
		c.Approval = &a
	}
	if st.Wide != nil {
		w := *st.Wide
		w.Failures = append([]ItemFailure(nil), st.Wide.Failures...)
		c.Wide = &w
	}
	if st.Items != nil {
		c.Items = make([]StepStatus, len(st.Items))
		for i := range st.Items {
			c.Items[i] = st.Items[i].Clone()
		}
	}
	return c
}

// MarkUnfinished ends st, and each of its items, still in flight in state
// with msg as its message unless it has one.
func MarkUnfinished(st *StepStatus, state StepState, msg string) {
	for i := range st.Items {
		MarkUnfinished(&st.Items[i], state, msg)
	}
	if !st.State.Terminal() {
		st.State = state
		if st.Message == "" {
			st.Message = msg
		}
	}
}

// OutputTail introduces the last lines a failed step printed, appended to
// its error (and the run's) by the local runtime. Whatever a step prints
// is its own data: webhooks leave it out unless they opt in
// (WithoutOutput).
const OutputTail = "; last lines of output:\n"

// WithoutOutput is msg without the step output OutputTail quotes.
func WithoutOutput(msg string) string {
	if i := strings.Index(msg, OutputTail); i >= 0 {
		return msg[:i] + " (output left out)"
	}
	return msg
}
