package runstate

import (
	"bytes"
	"encoding/json"
)

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
	Source *CacheSource `json:"source,omitempty"`
	// WideFrom, for a wide forEach step that did not succeed, is the run
	// whose succeeded items its batches take (from Postgres, by index and
	// item value: they are not listed here).
	WideFrom string `json:"wideFrom,omitempty"`
	// Artifacts are the step's output artifacts, reused with its outputs.
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// Metrics are what the step reported, reused with its outputs.
	Metrics *Metrics `json:"metrics,omitempty"`
}

// ReusedItem is a forEach item that succeeded, with the item value it ran
// for: reused only when the retry evaluates the same value at that index.
type ReusedItem struct {
	Index   int          `json:"index"`
	Item    any          `json:"item"`
	Outputs any          `json:"outputs,omitempty"`
	Source  *CacheSource `json:"source,omitempty"`
}

// SourceFor is where reused outputs come from: src, or the retried run
// when src is unknown.
func (r *Reuse) SourceFor(src *CacheSource, step string, item *int) *CacheSource {
	if src != nil {
		return src
	}
	return &CacheSource{Run: r.RetryOf, Step: step, Item: item}
}

// Step finds a reused step by name (nil when it runs again).
func (r *Reuse) Step(name string) *ReusedStep {
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

// Item finds a reused item of the step at index k for item value v.
func (s *ReusedStep) Item(k int, v any) *ReusedItem {
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

// sameJSON compares two values by their JSON (maps encode with sorted
// keys, so this is deterministic).
func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
