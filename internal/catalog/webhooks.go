package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/atelier-ml/atelier/runstate"
)

// Webhook event types.
const (
	// EventRunFinished: a run reached a terminal state (SUCCEEDED, FAILED,
	// CANCELLED, TERMINATED), after its exit handlers.
	EventRunFinished = "run.finished"
	// EventStepFailed: a step ended FAILED (after its retries), exit
	// handlers included; a forEach step fails as a whole.
	EventStepFailed = "step.failed"
	// EventApprovalRequested: an approval step started waiting for a
	// decision.
	EventApprovalRequested = "approval.requested"
)

// WebhookEvents lists the event types, in the order documentation shows.
var WebhookEvents = []string{EventRunFinished, EventStepFailed, EventApprovalRequested}

// Webhook is a project's subscription to run events. Secret is the
// HMAC-SHA256 key of the deliveries' signature; it is never served back,
// and read back from a store that seals it (store.WithSecretBox) it is
// empty: only the dispatcher's claims open it.
type Webhook struct {
	ID          string
	Project     string
	URL         string
	Events      []string
	Pipeline    string // "": every run of the project
	Secret      string
	Description string
	Enabled     bool
	// IncludeOutput opts in to the step output that errors quote (the
	// last lines a failed step printed): left out otherwise.
	IncludeOutput bool
	CreatedAt     time.Time
	UpdatedAt     time.Time
	CreatedBy     string
}

// WebhookUpdate changes the fields that are not nil.
type WebhookUpdate struct {
	URL           *string
	Events        []string // nil: unchanged
	Pipeline      *string  // "" removes the filter
	Secret        *string
	Description   *string
	Enabled       *bool
	IncludeOutput *bool
	ClearPipeline bool
}

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliverySucceeded = "succeeded"
	DeliveryFailed    = "failed"
)

// WebhookDelivery is one event sent (or to be sent) to one webhook, with
// its attempts, oldest first.
type WebhookDelivery struct {
	ID            string
	WebhookID     string
	RunID         string
	EventID       string
	Event         string
	Step          string
	State         string
	Attempts      int
	NextAttemptAt *time.Time // pending only
	LastStatus    *int
	LastError     string
	CreatedAt     time.Time
	FinishedAt    *time.Time
	Log           []WebhookAttempt
}

// WebhookAttempt is one HTTP request of a delivery.
type WebhookAttempt struct {
	Attempt    int
	StartedAt  time.Time
	Duration   time.Duration
	StatusCode *int // nil: no response (connection refused, timeout, ...)
	Error      string
}

// WebhookDeliveryPage is one page of a webhook's delivery log.
type WebhookDeliveryPage struct {
	Deliveries    []WebhookDelivery
	NextPageToken string
}

// RunEvent is a notable event a run status shows, as webhooks deliver it.
type RunEvent struct {
	// ID is the same whenever the event is derived again (every mirror
	// write of the run from then on): receivers deduplicate on it.
	ID   string
	Type string
	Step string // "" for run.finished
	// Payload leaves out the step output errors quote
	// (runstate.OutputTail); PayloadWithOutput keeps it, for webhooks
	// that opt in (the same bytes when there is none).
	Payload, PayloadWithOutput json.RawMessage
}

// RunEvents derives the events st shows: run.finished when it is
// terminal; step.failed for each FAILED step; approval.requested for each
// approval step that has asked for a decision (whether or not it was
// decided since). Derived from the whole status, not from a change, they
// are the same for any later status of the run: a status write that is
// lost or coalesced loses none, and the outbox's (webhook, event ID) key
// makes each one delivered once. Payloads carry the run's identity, state
// and error and the step's (without the output a failed step's error
// quotes, unless a webhook opts in), never params, outputs or anything of the
// platform's own.
func RunEvents(st runstate.Status) []RunEvent {
	var out []RunEvent
	failed := []string{}
	for _, s := range st.Steps {
		if s.State == runstate.StepFailed && !s.OnExit {
			failed = append(failed, s.Name)
		}
	}
	run := eventRun{
		ID: st.RunID, Pipeline: st.Pipeline, Version: st.Version, Workflow: st.Workflow,
		State: st.State, Error: st.Error, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt,
		FailedSteps: failed, ScheduleID: st.ScheduleID, RetryOf: st.RetryOf,
	}
	add := func(typ string, step *runstate.StepStatus, at *time.Time) {
		key := typ
		p := eventPayload{Type: typ, Project: st.Project, Run: run}
		if at != nil {
			p.Time = at.UTC()
		}
		if step != nil {
			key += "/" + step.Name
			es := &eventStep{Name: step.Name, Kind: step.Kind, State: step.State, Error: step.Error, OnExit: step.OnExit}
			if a := step.Approval; a != nil && typ == EventApprovalRequested {
				es.Approval = &eventApproval{Message: a.Message, Roles: a.Roles, CommentRequired: a.CommentRequired, Deadline: a.Deadline}
			}
			p.Step = es
		}
		sum := sha256.Sum256([]byte(st.RunID + "\x00" + key))
		p.ID = "evt-" + hex.EncodeToString(sum[:12])
		full, _ := json.Marshal(p) // plain data: cannot fail
		p.Run.Error = runstate.WithoutOutput(p.Run.Error)
		if p.Step != nil {
			s := *p.Step
			s.Error = runstate.WithoutOutput(s.Error)
			p.Step = &s
		}
		plain, _ := json.Marshal(p)
		out = append(out, RunEvent{ID: p.ID, Type: typ, Step: stepName(step), Payload: plain, PayloadWithOutput: full})
	}
	for i := range st.Steps {
		s := &st.Steps[i]
		if s.Approval != nil {
			add(EventApprovalRequested, s, s.StartedAt)
		}
		if s.State == runstate.StepFailed {
			add(EventStepFailed, s, s.FinishedAt)
		}
	}
	if st.State.Terminal() {
		add(EventRunFinished, nil, st.FinishedAt)
	}
	return out
}

func stepName(s *runstate.StepStatus) string {
	if s == nil {
		return ""
	}
	return s.Name
}

// The payload's JSON shape (documented in docs/api.md).
type eventPayload struct {
	ID      string     `json:"id"`
	Type    string     `json:"type"`
	Time    time.Time  `json:"time"`
	Project string     `json:"project"`
	Run     eventRun   `json:"run"`
	Step    *eventStep `json:"step,omitempty"`
}

type eventRun struct {
	ID          string         `json:"id"`
	Pipeline    string         `json:"pipeline,omitempty"`
	Version     int            `json:"version,omitempty"`
	Workflow    string         `json:"workflow"`
	State       runstate.State `json:"state"`
	Error       string         `json:"error,omitempty"`
	StartedAt   *time.Time     `json:"startedAt,omitempty"`
	FinishedAt  *time.Time     `json:"finishedAt,omitempty"`
	FailedSteps []string       `json:"failedSteps"`
	ScheduleID  string         `json:"scheduleId,omitempty"`
	RetryOf     string         `json:"retryOf,omitempty"`
}

type eventStep struct {
	Name     string             `json:"name"`
	Kind     string             `json:"kind"`
	State    runstate.StepState `json:"state"`
	Error    string             `json:"error,omitempty"`
	OnExit   bool               `json:"onExit,omitempty"`
	Approval *eventApproval     `json:"approval,omitempty"`
}

type eventApproval struct {
	Message         string     `json:"message,omitempty"`
	Roles           []string   `json:"roles"`
	CommentRequired bool       `json:"commentRequired,omitempty"`
	Deadline        *time.Time `json:"deadline,omitempty"`
}

// ClaimedDelivery is a delivery a dispatcher holds the lease of, for
// attempt number Attempt.
type ClaimedDelivery struct {
	ID      string
	Event   string
	EventID string
	Attempt int
	Payload []byte
	URL     string
	Secret  string
}

// AttemptResult is the outcome of one attempt of a claimed delivery and
// what happens next: State pending with NextAttemptAt, or succeeded or
// failed (final).
type AttemptResult struct {
	DeliveryID    string
	Owner         string
	Attempt       int
	State         string
	NextAttemptAt time.Time
	StartedAt     time.Time
	Duration      time.Duration
	StatusCode    *int
	Error         string
}
