package catalog

import (
	"encoding/json"
	"time"

	"github.com/atelier-ml/atelier/runstate"
)

// Trigger kinds.
const (
	// TriggerRun fires when a run of OnPipeline ends in one of OnStates.
	TriggerRun = "run"
	// TriggerHook fires on a POST to the trigger's inbound URL signed
	// with its secret.
	TriggerHook = "hook"
)

// Trigger starts a pipeline when something happens (migrations/00014).
// Params are the started run's params: JSON values whose strings may hold
// {{ }} templates over the firing's payload. Secret (hook) is the
// HMAC-SHA256 key of the inbound requests' signature; read back from a
// store that seals it, it is empty: only VerifyHook opens it.
type Trigger struct {
	ID           string
	Project      string
	Name         string
	Kind         string
	OnPipeline   string
	OnStates     []runstate.State
	Pipeline     string
	Version      int // 0: the newest when it fires
	Params       map[string]any
	Secret       string
	MaxPerMinute int
	Enabled      bool
	Description  string
	CreatedAt    time.Time
	CreatedBy    string
}

// Firing states.
const (
	FiringPending = "pending"
	FiringStarted = "started"
	FiringFailed  = "failed"
)

// TriggerFiring is one occurrence of a trigger's event and the run it
// started (or why none).
type TriggerFiring struct {
	ID            string
	TriggerID     string
	Project       string
	Source        string // the upstream run, or the request's delivery ID
	Payload       json.RawMessage
	State         string
	Attempts      int
	NextAttemptAt *time.Time // pending only
	RunID         string
	Params        map[string]any // what the run got; nil before it started
	Error         string
	CreatedAt     time.Time
	FinishedAt    *time.Time
}

// TriggerFiringPage is one page of a trigger's firing log.
type TriggerFiringPage struct {
	Firings       []TriggerFiring
	NextPageToken string
}

// ClaimedFiring is a firing leased to one dispatcher for one attempt,
// with what it starts.
type ClaimedFiring struct {
	ID        string
	TriggerID string
	Trigger   string // its name
	Kind      string
	Project   string
	Source    string
	Payload   json.RawMessage
	Attempt   int
	Pipeline  string
	Version   int
	Params    map[string]any
}

// FiringResult ends an attempt of a claimed firing: State started (RunID
// set), failed (for good, Error says why), or pending (retried at
// NextAttemptAt).
type FiringResult struct {
	ID            string
	Owner         string
	Attempt       int
	State         string
	RunID         string
	Params        map[string]any // the rendered params the run was started with
	Error         string
	NextAttemptAt time.Time
}

// RunFinishedPayload is what a run trigger's templates read as upstream:
// the finished run's identity, state, params, pipeline outputs (a
// declarative pipeline's outputs, a Go pipeline's result) and its
// top-level steps' states and outputs.
type RunFinishedPayload struct {
	RunID    string                     `json:"runId"`
	Pipeline string                     `json:"pipeline"`
	Version  int                        `json:"version,omitempty"`
	State    runstate.State             `json:"state"`
	Error    string                     `json:"error,omitempty"`
	Params   map[string]any             `json:"params"`
	Outputs  any                        `json:"outputs"`
	Steps    map[string]RunFinishedStep `json:"steps,omitempty"`
}

// RunFinishedStep is one step of RunFinishedPayload: its state, outputs
// and the artifacts it wrote, by output name (an id names the artifact to
// a step input of the started pipeline: `artifact: "{{ params.model }}"`).
type RunFinishedStep struct {
	State     runstate.StepState             `json:"state"`
	Outputs   any                            `json:"outputs"`
	Artifacts map[string]RunFinishedArtifact `json:"artifacts,omitempty"`
}

// RunFinishedArtifact is an artifact of RunFinishedStep.
type RunFinishedArtifact struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// MaxRunFinishedPayload bounds a run trigger's payload: past it the steps'
// outputs are left out (the run's params and outputs stay).
const MaxRunFinishedPayload = 256 << 10

// NewRunFinishedPayload is st's payload for run triggers (subject: the
// pipeline or Go workflow name), within MaxRunFinishedPayload.
func NewRunFinishedPayload(st runstate.Status, subject string) ([]byte, error) {
	p := RunFinishedPayload{
		RunID: st.RunID, Pipeline: subject, Version: st.Version, State: st.State, Error: st.Error,
		Params: st.Params, Outputs: st.Result, Steps: map[string]RunFinishedStep{},
	}
	if p.Params == nil {
		p.Params = map[string]any{}
	}
	for _, s := range st.Steps {
		if s.OnExit {
			continue
		}
		rs := RunFinishedStep{State: s.State, Outputs: s.Outputs}
		for _, a := range s.Artifacts {
			if rs.Artifacts == nil {
				rs.Artifacts = map[string]RunFinishedArtifact{}
			}
			rs.Artifacts[a.Name] = RunFinishedArtifact{ID: a.ID, Type: a.Type, Digest: a.Digest, Size: a.Size}
		}
		p.Steps[s.Name] = rs
	}
	b, err := json.Marshal(p)
	if err == nil && len(b) > MaxRunFinishedPayload {
		for name, s := range p.Steps {
			p.Steps[name] = RunFinishedStep{State: s.State, Artifacts: s.Artifacts}
		}
		b, err = json.Marshal(p)
	}
	return b, err
}
