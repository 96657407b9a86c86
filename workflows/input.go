package workflows

import "github.com/atelier-ml/atelier/workflows/spec"

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
}
