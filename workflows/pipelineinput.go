package workflows

import (
	"time"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

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
	Reuse *runstate.Reuse `json:"reuse,omitempty"`
	// Cache holds the run's step cache options (nil: the defaults).
	Cache *RunCache `json:"cache,omitempty"`
	// Parent is set on a child run, started by a pipeline step of
	// another run.
	Parent *ParentRun `json:"parent,omitempty"`
	// Targets, when set, runs a subset of the pipeline: these steps and
	// what they need (their dependencies, transitively); the others end
	// SKIPPED and the pipeline's outputs are not evaluated. Exit handlers
	// run as usual.
	Targets []string `json:"targets,omitempty"`
}

// RunCache are a run's step cache options.
type RunCache struct {
	// Bypass runs every cached step instead of looking it up; successful
	// results still replace the entries, so later runs reuse them.
	Bypass bool `json:"bypass,omitempty"`
}

// PipelineResult is what a declarative run returns: the pipeline's
// outputs (pipeline.Spec.Outputs) and the artifacts it exports
// (pipeline.Spec.Artifacts), which a parent's pipeline step takes as its
// own. Results recorded before exports decode with none.
type PipelineResult struct {
	Outputs map[string]any `json:"outputs,omitempty"`
	// Artifacts are the exported artifacts, in the spec's order, each
	// under its exported name with From its "<step>.<artifact>" in the
	// child: references to what the child's steps wrote (ID, digest,
	// producer), not copies.
	Artifacts []runstate.Artifact `json:"artifacts,omitempty"`
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
