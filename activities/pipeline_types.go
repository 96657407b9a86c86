package activities

import (
	"github.com/atelier-ml/atelier/pipeline"
)

// ResolvePipelineName reads the stored pipeline a pipeline step runs as a
// child run (package activities/pipelines, on the local workers' control
// queue, which hold the catalogue). Its answer is recorded in history, so
// "the newest version" is decided once, when the step starts, and replay
// never reads the catalogue.
const ResolvePipelineName = "atelier.pipeline.resolve"

// ErrTypePipelineNotFound: the project has no such pipeline or version.
// Retrying cannot create it.
const ErrTypePipelineNotFound = "PipelineNotFound"

// ResolvePipelineRequest names a stored pipeline of a project.
type ResolvePipelineRequest struct {
	// Project is the run's own project: a run never reads another
	// project's pipelines.
	Project  string `json:"project"`
	Pipeline string `json:"pipeline"`
	// Version 0 asks for the newest version.
	Version int `json:"version,omitempty"`
}

// ResolvePipelineResult is the version found and its spec.
type ResolvePipelineResult struct {
	Version int           `json:"version"`
	Spec    pipeline.Spec `json:"spec"`
}
