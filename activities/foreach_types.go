package activities

import (
	"encoding/json"
	"time"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

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
	// FanInName assembles the directory a step reads from a wide step's
	// artifact: each item's under its index (FanInRequest → FanInResult).
	FanInName = "atelier.foreach.fan-in"
)

// FanInRequest asks for the directory holding the artifact Artifact of
// every item of the forEach step that wrote it, under the item's index:
// of the wide step Wide (its items' references are read from Postgres),
// or, when Items is set, of a small forEach's items, whose references the
// workflow holds (a child pipeline's export of such a step: Wide names
// the run, the step and the length).
type FanInRequest struct {
	Project  string           `json:"project"`
	Wide     runstate.WideRef `json:"wide"`
	Artifact string           `json:"artifact"`
	Items    []FanInItem      `json:"items,omitempty"`
}

// FanInItem is one item's artifact in a FanInRequest: only what the
// directory's manifest needs (at most spec.WideThreshold of them, about
// 120 bytes each).
type FanInItem struct {
	Index  int    `json:"index"`
	Type   string `json:"type,omitempty"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	Files  int    `json:"files,omitempty"`
}

// FanInResult is the directory, stored and recorded in lineage as an
// artifact of the wide step (Producer: its run and step, no item), or
// Problem: why it cannot be made (the step fails with it).
type FanInResult struct {
	Artifact runstate.Artifact `json:"artifact"`
	Problem  string            `json:"problem,omitempty"`
}

// RecordItemsRequest is a batch of finished items to store. Project is
// the run's, for the lineage of the artifacts items wrote (absent from
// requests recorded before items kept their artifacts, whose items carry
// none).
type RecordItemsRequest struct {
	Project string                `json:"project,omitempty"`
	RunID   string                `json:"runId"`
	Step    string                `json:"step"`
	Items   []runstate.ItemRecord `json:"items"`
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
	Params  map[string]any              `json:"params,omitempty"`
	Outputs map[string]any              `json:"outputs,omitempty"`
	Wide    map[string]runstate.WideRef `json:"wide"`
	Run     pipeline.RunEnv             `json:"run"`
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
	// PipelineOutputs asks for the pipeline's outputs (pipeline.Spec's
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
	Promote   *pipeline.PromoteStep   `json:"promote,omitempty"`
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
	Wide    map[string]runstate.WideRef `json:"wide"`
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
	// ItemWhen is the step's forEach.when, evaluated per item before its
	// templates (Step.ForEach does not carry it: a literal list has none).
	ItemWhen string `json:"itemWhen,omitempty"`
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
	// Skip is why the item is SKIPPED (its forEach.when is false); it
	// then has no work.
	Skip string `json:"skip,omitempty"`
}

// ErrTypeRender is the application error type of a step whose templates
// cannot be rendered (a bad expression, over budget): not retried.
const ErrTypeRender = "RenderFailed"

// RenderItemsTime bounds the time one RenderItemsName call spends
// rendering (it returns what it has, at least one item): a per-item
// reducer over 100,000 outputs is slow, and the activity must end well
// within its timeout to make progress.
const RenderItemsTime = 20 * time.Second
