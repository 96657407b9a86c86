package activities

import (
	"time"

	"github.com/atelier-ml/atelier/inference"
)

// DeployEndpointName runs one attempt of an inference pipeline step
// (package activities/deploy): it creates the run's endpoint or updates
// its spec, then waits until the revision that results is promoted or
// rolled back. It talks to Temporal only (the endpoint's entity workflow),
// so the local worker runs it, on its step queue: it waits as long as a
// rollout lasts and must not hold one of the short bookkeeping slots of
// the control queue.
const DeployEndpointName = "atelier.endpoint.deploy"

// DeployEndpointRequest is one attempt of an inference step, rendered.
type DeployEndpointRequest struct {
	Project string `json:"project"`
	RunID   string `json:"runId"`
	Step    string `json:"step"`
	Item    *int   `json:"item,omitempty"`
	Attempt int    `json:"attempt"`
	// Endpoint is the endpoint's name in Project.
	Endpoint string `json:"endpoint"`
	// Cluster is where a new endpoint runs ("" = the local runtime); an
	// existing one stays where it is.
	Cluster string                 `json:"cluster,omitempty"`
	Spec    inference.EndpointSpec `json:"spec"`
	// Timeout bounds the wait for the rollout; the rollout itself goes on.
	Timeout time.Duration `json:"timeout"`
}

// DeployEndpointResult is a promoted revision.
type DeployEndpointResult struct {
	Endpoint string `json:"endpoint"`
	Revision int    `json:"revision"`
	// Created: the step created the endpoint (on Cluster).
	Created    bool      `json:"created,omitempty"`
	Cluster    string    `json:"cluster,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
}

// DeployProgress is the heartbeat of a deploy attempt: where the rollout
// is, and what a retried execution of the attempt resumes from (the
// revision it waits for, and when the attempt started, which its timeout
// counts from).
type DeployProgress struct {
	Revision  int       `json:"revision"`
	Created   bool      `json:"created,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	Message   string    `json:"message,omitempty"`
}
