package runstate

import (
	"time"

	"github.com/atelier-ml/atelier/pipeline"
)

// WideStatus is a wide forEach step's progress in the run status: counts,
// not items (those are paged from GET …/steps/{step}/items).
type WideStatus struct {
	// Items is the length of the list.
	Items int `json:"items"`
	// Batches is how many batch workflows the items are split into, and
	// BatchesDone how many of them have ended.
	Batches     int `json:"batches"`
	BatchesDone int `json:"batchesDone"`
	// Parallelism is the items in flight at most, over all batches.
	Parallelism int `json:"parallelism"`
	// Counts are the items per final state. The workflow counts a batch's
	// items when the batch ends; the gateway serves live counts from
	// Postgres while the step runs.
	Counts ItemCounts `json:"counts"`
	// Failures are the first failed items (at most MaxWideFailures, lowest
	// index first among those known).
	Failures []ItemFailure `json:"failures,omitempty"`
	// Outputs locates the items' outputs once the step succeeded (what
	// steps.<name>.outputs reads).
	Outputs *WideRef `json:"outputsRef,omitempty"`
}

// WideCluster is the Kubernetes cluster the items of a wide container step
// with a placement run on, chosen once by the pipeline workflow
// (dag.wideCluster) and carried to its batches.
type WideCluster struct {
	// Placement is the step's effective placement (its own or the
	// pipeline's).
	Placement *pipeline.Placement `json:"placement"`
	Cluster   string              `json:"cluster"`
	// TaskQueue is the cluster worker's queue, where the items' activities go.
	TaskQueue string `json:"taskQueue"`
}

// ItemCounts are items per state. NotRun are items that never started (the
// step stopped, was cancelled, or the run failed); Skipped are items whose
// forEach.when was false (a finished item, with null outputs).
type ItemCounts struct {
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	Cached    int `json:"cached"`
	NotRun    int `json:"notRun"`
	Skipped   int `json:"skipped,omitempty"`
}

// Add adds the counts of o.
func (c *ItemCounts) Add(o ItemCounts) {
	c.Succeeded += o.Succeeded
	c.Failed += o.Failed
	c.Cancelled += o.Cancelled
	c.Cached += o.Cached
	c.NotRun += o.NotRun
	c.Skipped += o.Skipped
}

// Count adds one finished item in state s.
func (c *ItemCounts) Count(s StepState) {
	switch s {
	case StepSucceeded:
		c.Succeeded++
	case StepFailed:
		c.Failed++
	case StepCached:
		c.Cached++
	case StepSkipped:
		c.Skipped++
	default:
		c.Cancelled++
	}
}

// MaxWideFailures bounds WideStatus.Failures.
const MaxWideFailures = 10

// ItemFailure is one failed item, as shown in the run status.
type ItemFailure struct {
	Index int    `json:"index"`
	Item  any    `json:"item,omitempty"`
	Error string `json:"error"`
}

// WideRef locates a wide step's outputs: the items of Step in run Run
// (step_items), Items long. It stands for steps.<name>.outputs in the
// pipeline workflow; templates that read it are rendered by an activity
// (RenderStepName).
type WideRef struct {
	Run   string `json:"run"`
	Step  string `json:"step"`
	Items int    `json:"items"`
}

// wideRefKey marks a WideRef in a step's outputs as stored in the run
// status and in a retry's Reuse (a JSON object {"atelier.wideOutputs": …}).
const wideRefKey = "atelier.wideOutputs"

// WideOutputs is how a wide step's outputs appear where outputs are JSON
// (a retry's Reuse of the step: api/retry.go).
func WideOutputs(ref WideRef) map[string]any {
	return map[string]any{wideRefKey: map[string]any{"run": ref.Run, "step": ref.Step, "items": ref.Items}}
}

// wideRefOf recognises outputs made by wideOutputs (after a JSON round
// trip, as in a retry's input).
func WideRefOf(v any) (WideRef, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return WideRef{}, false
	}
	r, ok := m[wideRefKey].(map[string]any)
	if !ok {
		return WideRef{}, false
	}
	run, _ := r["run"].(string)
	step, _ := r["step"].(string)
	var n int
	switch x := r["items"].(type) {
	case float64:
		n = int(x)
	case int:
		n = x
	}
	return WideRef{Run: run, Step: step, Items: n}, run != "" && step != ""
}

// ItemRecord is one finished item of a wide step, as stored in Postgres
// and served by GET …/steps/{step}/items.
type ItemRecord struct {
	Index    int       `json:"index"`
	State    StepState `json:"state"`
	Item     any       `json:"item"`
	Attempts []Attempt `json:"attempts"`
	Error    string    `json:"error,omitempty"`
	Message  string    `json:"message,omitempty"`
	Outputs  any       `json:"outputs,omitempty"`
	// Artifacts are the artifacts a succeeded item wrote (references):
	// a step reading the wide step's artifact gets them all, each under
	// its index (a fan-in).
	Artifacts  []Artifact `json:"artifacts,omitempty"`
	StartedAt  time.Time  `json:"startedAt"`
	FinishedAt time.Time  `json:"finishedAt"`
}
