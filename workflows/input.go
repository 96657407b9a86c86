package workflows

import (
	"bytes"
	"encoding/json"

	"github.com/atelier-ml/atelier/workflows/spec"
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
	Spec     spec.Pipeline  `json:"spec"`
	Params   map[string]any `json:"params,omitempty"`
	// GPUPriority is the priority of the run's GPU steps in GPU admission
	// (nil: the project's default).
	GPUPriority *int `json:"gpuPriority,omitempty"`
	// Reuse, set on a retry, holds the outputs of the steps (and forEach
	// items) of an earlier run that are not run again.
	Reuse *Reuse `json:"reuse,omitempty"`
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
	// WideFrom, for a wide forEach step that did not succeed, is the run
	// whose succeeded items its batches take (from Postgres, by index and
	// item value: they are not listed here).
	WideFrom string `json:"wideFrom,omitempty"`
}

// ReusedItem is a forEach item that succeeded, with the item value it ran
// for: reused only when the retry evaluates the same value at that index.
type ReusedItem struct {
	Index   int `json:"index"`
	Item    any `json:"item"`
	Outputs any `json:"outputs,omitempty"`
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
