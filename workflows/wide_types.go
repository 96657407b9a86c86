package workflows

import (
	"encoding/json"
	"time"

	"github.com/atelier-ml/atelier/pipeline"
)

// Wide forEach (wide.go, widebatch.go): the types that travel between the
// pipeline workflow, its batch workflows, the item activities
// (activities/foreach) and the gateway.

// ForEachBatchWorkflowName is the registered name of the batch workflow of
// a wide forEach step.
const ForEachBatchWorkflowName = "atelier.ForEachBatch"

// SignalBatchStop tells a batch workflow to start no more items (another
// batch's failures used up what the step tolerates).
const SignalBatchStop = "atelier.foreach.stop"

// Activity names of the wide path. Part of workflow histories: never
// rename one.
const (
	// RecordItemsName writes finished items to Postgres (RecordItemsRequest).
	RecordItemsName = "atelier.foreach.record"
	// ReuseItemsName copies a retried run's succeeded items
	// (ReuseItemsRequest → ReuseItemsResult).
	ReuseItemsName = "atelier.foreach.reuse"
	// RenderStepName renders a step whose templates read a wide step's
	// outputs (RenderRequest → RenderResult).
	RenderStepName = "atelier.step.render"
	// RenderItemsName renders the items of a forEach step whose
	// templates read a wide step's outputs, a chunk at a time
	// (RenderItemsRequest → RenderItemsResult).
	RenderItemsName = "atelier.foreach.render-items"
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
// step stopped, was cancelled, or the run failed).
type ItemCounts struct {
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	Cached    int `json:"cached"`
	NotRun    int `json:"notRun"`
}

func (c *ItemCounts) add(o ItemCounts) {
	c.Succeeded += o.Succeeded
	c.Failed += o.Failed
	c.Cancelled += o.Cancelled
	c.Cached += o.Cached
	c.NotRun += o.NotRun
}

// count adds one finished item in state s.
func (c *ItemCounts) count(s StepState) {
	switch s {
	case StepSucceeded:
		c.Succeeded++
	case StepFailed:
		c.Failed++
	case StepCached:
		c.Cached++
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
func wideRefOf(v any) (WideRef, bool) {
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
	Index      int       `json:"index"`
	State      StepState `json:"state"`
	Item       any       `json:"item"`
	Attempts   []Attempt `json:"attempts"`
	Error      string    `json:"error,omitempty"`
	Message    string    `json:"message,omitempty"`
	Outputs    any       `json:"outputs,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
}

// RecordItemsRequest is a batch of finished items to store.
type RecordItemsRequest struct {
	RunID string       `json:"runId"`
	Step  string       `json:"step"`
	Items []ItemRecord `json:"items"`
}

// ReuseItemsRequest asks which items of a batch a retry takes from the
// run it retries (OldRun): those that succeeded there at the same index
// with the same value. They are stored as CACHED items of RunID.
type ReuseItemsRequest struct {
	RunID  string `json:"runId"`
	OldRun string `json:"oldRun"`
	Step   string `json:"step"`
	Start  int    `json:"start"`
	Items  []any  `json:"items"`
}

// ReuseItemsResult lists the reused indexes, ascending.
type ReuseItemsResult struct {
	Indexes []int `json:"indexes,omitempty"`
}

// RenderRequest renders a step whose templates (or when) read the outputs
// of wide steps, in an activity that loads those outputs from Postgres.
type RenderRequest struct {
	Step pipeline.Step `json:"step"`
	// Params, Outputs (of the other steps it reads) and Run make the
	// expression environment; Wide are the wide steps it reads.
	Params  map[string]any     `json:"params,omitempty"`
	Outputs map[string]any     `json:"outputs,omitempty"`
	Wide    map[string]WideRef `json:"wide"`
	Run     pipeline.RunEnv    `json:"run"`
	// Items asks for the step's forEach list (and when) instead of its
	// templates: a forEach whose items read a wide step's outputs.
	Items bool `json:"items,omitempty"`
	// ItemsByRef lets a list of more than spec.WideThreshold items that
	// is over MaxRenderedItems stay out of the workflow: the result then
	// has its length (Count) instead of the list.
	ItemsByRef bool `json:"itemsByRef,omitempty"`
	// WhenOnly asks for the step's when alone (Skip or nothing): a
	// forEach whose when reads a wide step's outputs but whose list does
	// not, so the list keeps being evaluated in the workflow.
	WhenOnly bool `json:"whenOnly,omitempty"`
	// PipelineOutputs asks for the pipeline's outputs (spec.Pipeline's
	// Outputs templates) instead of a step: outputs that read a wide
	// step's (wideexit.go).
	PipelineOutputs map[string]string `json:"pipelineOutputs,omitempty"`
}

// RenderResult is the rendered step: Skip when its when condition is false,
// else what one of its kinds needs.
type RenderResult struct {
	Skip      bool                    `json:"skip,omitempty"`
	Container *pipeline.Container     `json:"container,omitempty"`
	Ray       *pipeline.RayStep       `json:"ray,omitempty"`
	Spark     *pipeline.SparkStep     `json:"spark,omitempty"`
	Inference *pipeline.InferenceStep `json:"inference,omitempty"`
	Approval  *pipeline.ApprovalStep  `json:"approval,omitempty"`
	Pipeline  *pipeline.ChildStep     `json:"pipeline,omitempty"`
	// Items is the forEach list as a JSON array (RenderRequest.Items), at
	// most MaxRenderedItems bytes.
	Items json.RawMessage `json:"items,omitempty"`
	// Count is the list's length when it stays out of the workflow
	// (RenderRequest.ItemsByRef).
	Count int `json:"count,omitempty"`
	// PipelineOutputs are the evaluated outputs (RenderRequest's), at
	// most spec.MaxOutputsBytes of JSON.
	PipelineOutputs map[string]any `json:"pipelineOutputs,omitempty"`
}

// MaxRenderedItems bounds a forEach list computed from a wide step's
// outputs that enters the workflow: it is recorded in the pipeline's
// history. A longer list of more than spec.WideThreshold items stays out
// (RenderRequest.ItemsByRef): each batch fetches its own slice.
const MaxRenderedItems = 256 << 10

// RenderItemsRequest renders items [From, End) of a forEach step whose
// templates read the outputs of wide steps (RenderItemsName). The activity
// renders from From on and stops at End or at its size or time budget
// (RenderItemsResult says where), so a chunk's result stays far under
// Temporal's 2 MB payload limit whatever the items render to.
type RenderItemsRequest struct {
	// Step is the step's spec; Step.ForEach.Items is the list expression,
	// which the activity evaluates again over Params and Outputs (as a
	// batch does, so items keep the types the workflow saw), or absent
	// for a literal list, whose items [From, End) travel in Items.
	Step    pipeline.Step               `json:"step"`
	Params  map[string]any              `json:"params,omitempty"`
	Outputs map[string]pipeline.StepEnv `json:"outputs,omitempty"`
	Wide    map[string]WideRef          `json:"wide"`
	Run     pipeline.RunEnv             `json:"run"`
	From    int                         `json:"from"`
	End     int                         `json:"end"`
	// Total is the length of the whole list (checked against the
	// activity's evaluation).
	Total int   `json:"total"`
	Items []any `json:"items,omitempty"`
	// ValuesOnly asks for the items' values instead of their rendered
	// work (a batch's items of a list that stayed out of the workflow).
	ValuesOnly bool `json:"valuesOnly,omitempty"`
}

// RenderItemsResult holds the rendered items From, From+1, … of the
// request, in order: at least one, at most End-From.
type RenderItemsResult struct {
	Items []RenderedItem `json:"items"`
	// Values are the items' values (RenderItemsRequest.ValuesOnly).
	Values []any `json:"values,omitempty"`
}

// RenderedItem is one item's rendered work, or why its templates could
// not be rendered (the item then fails, as a template error fails an item
// rendered in the workflow).
type RenderedItem struct {
	Container *pipeline.Container     `json:"container,omitempty"`
	Ray       *pipeline.RayStep       `json:"ray,omitempty"`
	Spark     *pipeline.SparkStep     `json:"spark,omitempty"`
	Inference *pipeline.InferenceStep `json:"inference,omitempty"`
	Pipeline  *pipeline.ChildStep     `json:"pipeline,omitempty"`
	// Error is the item's template error (the item fails with it).
	Error string `json:"error,omitempty"`
}
