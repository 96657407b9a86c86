package workflows

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// sameJSON compares two values by their JSON (maps encode with sorted
// keys, so this is deterministic).
func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// PipelineInput is the single input of the generic pipeline workflow
// (PipelineWorkflowName). The gateway resolves params (defaults applied,
// types checked) before starting, and the whole spec travels in the input so
// replay never reads the catalogue.
type PipelineInput struct {
	RunID    string         `json:"runId"`
	Project  string         `json:"project"`
	Pipeline string         `json:"pipeline"`
	Version  int            `json:"version"`
	Spec     pipeline.Spec  `json:"spec"`
	Params   map[string]any `json:"params,omitempty"`
	// GPUPriority is the priority of the run's GPU steps in GPU admission
	// (nil: the project's default).
	GPUPriority *int `json:"gpuPriority,omitempty"`
	// Reuse, set on a retry, holds the outputs of the steps (and forEach
	// items) of an earlier run that are not run again.
	Reuse *Reuse `json:"reuse,omitempty"`
	// Cache holds the run's step cache options (nil: the defaults).
	Cache *RunCache `json:"cache,omitempty"`
	// Parent is set on a child run, started by a pipeline step of
	// another run.
	Parent *ParentRun `json:"parent,omitempty"`
}

// RunCache are a run's step cache options.
type RunCache struct {
	// Bypass runs every cached step instead of looking it up; successful
	// results still replace the entries, so later runs reuse them.
	Bypass bool `json:"bypass,omitempty"`
}

// PipelineResult is what a declarative run returns: the pipeline's
// outputs (spec.Pipeline.Outputs), which a parent's pipeline step takes
// as its own.
type PipelineResult struct {
	Outputs map[string]any `json:"outputs,omitempty"`
}

// ParentRun is where a child run comes from.
type ParentRun struct {
	RunID string `json:"runId"`
	// Step is the parent's step, an item as "<step>[<i>]".
	Step string `json:"step"`
	// Depth is how many levels below the run a user started this run
	// is (1 for a child of that run); at most spec.MaxPipelineDepth.
	Depth int `json:"depth"`
	// Pipelines are the pipelines of the runs above this one, the top
	// first, so that a nesting too deep names the chain.
	Pipelines []string `json:"pipelines,omitempty"`
	// NotAfter is the parent's bound on this run: the parent's own
	// deadline or the step's timeout, whichever comes first.
	NotAfter *time.Time `json:"notAfter,omitempty"`
}

// Reuse is what a retry takes from the run it retries.
type Reuse struct {
	// RetryOf is the run retried.
	RetryOf string       `json:"retryOf"`
	Steps   []ReusedStep `json:"steps,omitempty"`
}

// ReusedStep is a step that succeeded in the retried run: its outputs
// (Done), or for a forEach step that did not finish, the items that
// succeeded.
type ReusedStep struct {
	Name    string       `json:"name"`
	Done    bool         `json:"done,omitempty"`
	Outputs any          `json:"outputs,omitempty"`
	Items   []ReusedItem `json:"items,omitempty"`
	// Source is the execution that produced Outputs (nil in retries
	// started before sources were recorded: the retried run).
	Source *runstate.CacheSource `json:"source,omitempty"`
	// WideFrom, for a wide forEach step that did not succeed, is the run
	// whose succeeded items its batches take (from Postgres, by index and
	// item value: they are not listed here).
	WideFrom string `json:"wideFrom,omitempty"`
}

// ReusedItem is a forEach item that succeeded, with the item value it ran
// for: reused only when the retry evaluates the same value at that index.
type ReusedItem struct {
	Index   int                   `json:"index"`
	Item    any                   `json:"item"`
	Outputs any                   `json:"outputs,omitempty"`
	Source  *runstate.CacheSource `json:"source,omitempty"`
}

// reuseSource is where reused outputs come from: src, or the retried run
// when src is unknown.
func (r *Reuse) reuseSource(src *runstate.CacheSource, step string, item *int) *runstate.CacheSource {
	if src != nil {
		return src
	}
	return &runstate.CacheSource{Run: r.RetryOf, Step: step, Item: item}
}

// step finds a reused step by name (nil when it runs again).
func (r *Reuse) step(name string) *ReusedStep {
	if r == nil {
		return nil
	}
	for i := range r.Steps {
		if r.Steps[i].Name == name {
			return &r.Steps[i]
		}
	}
	return nil
}

// item finds a reused item of the step at index k for item value v.
func (s *ReusedStep) item(k int, v any) *ReusedItem {
	if s == nil {
		return nil
	}
	for i := range s.Items {
		if s.Items[i].Index == k && sameJSON(s.Items[i].Item, v) {
			return &s.Items[i]
		}
	}
	return nil
}
