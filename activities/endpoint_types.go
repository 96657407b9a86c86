package activities

import (
	"time"

	"github.com/atelier-ml/atelier/inference"
)

// Activity names of inference serving, called by the endpoint entity
// workflow (workflows.EndpointWorkflow) on the task queue of the runtime
// that serves the endpoint. Each is idempotent: the workflow may repeat
// any of them after a retry or a continue-as-new.
const (
	// ObserveEndpointName reads every revision's replicas (startup phases,
	// readiness, crash loops), traffic figures and queue signals.
	ObserveEndpointName = "atelier.endpoint.observe"
	// ApplyEndpointLayoutName makes the revisions' replica counts and the
	// traffic weights what the request says.
	ApplyEndpointLayoutName = "atelier.endpoint.apply"
	// DeleteEndpointRevisionsName removes revisions that no longer serve.
	DeleteEndpointRevisionsName = "atelier.endpoint.revisions.delete"
	// DeleteEndpointName removes everything of the endpoint.
	DeleteEndpointName = "atelier.endpoint.delete"
	// EndpointHeadroomName answers the project's GPU quota headroom where
	// the endpoint runs, before a rollout starts.
	EndpointHeadroomName = "atelier.endpoint.headroom"
)

// EndpointHeadroom is a project's GPU quota headroom where an endpoint
// runs: per GPU type, its quota (nominal plus what it may borrow) less
// what its pods hold now, the endpoint's own stable replicas included.
type EndpointHeadroom struct {
	// Limited: the project has a GPU policy there. Without one (or on a
	// runtime without quotas, such as the local one) nothing is checked.
	Limited  bool                  `json:"limited"`
	Headroom []inference.GPUAmount `json:"headroom,omitempty"`
	Used     []inference.GPUAmount `json:"used,omitempty"`
}

// EndpointRef names an endpoint.
type EndpointRef struct {
	Project  string `json:"project"`
	Endpoint string `json:"endpoint"`
}

// ObserveEndpointRequest asks for the state of the endpoint's revisions
// (deployment revision numbers). MeasureFrom starts the window of the
// traffic figures (request, error and latency counts) of revision
// Measured (0: none measured).
type ObserveEndpointRequest struct {
	EndpointRef
	// Backend says which metrics carry the queue (inference.Info).
	Backend     inference.Backend `json:"backend"`
	Revisions   []int             `json:"revisions"`
	Measured    int               `json:"measured,omitempty"`
	MeasureFrom time.Time         `json:"measureFrom,omitzero"`
	// Probes synthetic requests are sent to revision Measured first, when
	// the gates lack samples (inference.Step.Probes), for model ProbeModel
	// (its served name); their answers come back in its Probed.
	Probes     int    `json:"probes,omitempty"`
	ProbeModel string `json:"probeModel,omitempty"`
}

// RevisionObservation is one revision as observed.
type RevisionObservation struct {
	Revision int `json:"revision"`
	// Replicas is how many replicas exist (ready or not).
	Replicas int                      `json:"replicas"`
	Status   inference.RevisionStatus `json:"status"`
	// Queue holds one observation per ready replica that could be
	// scraped; a replica missing here is "unknown" to the autoscaler.
	Queue []inference.Observation `json:"queue,omitempty"`
	// Waiting says why replicas do not start (e.g. the scheduler's
	// reason), "" when nothing is stuck.
	Waiting string `json:"waiting,omitempty"`
	// URLs are the base URLs (scheme://host:port, no path) the gateway's
	// endpoint proxy forwards this revision's requests to, empty while no
	// replica is ready: one per ready replica where replicas are reached
	// one by one (the local runtime's processes), or one balanced address
	// (a Kubernetes revision's Service).
	URLs []string `json:"urls,omitempty"`
	// Probed is what the synthetic probes sent to this revision met
	// (package engineprobe), nil when none was sent.
	Probed *inference.RevisionTraffic `json:"probed,omitempty"`
}

// ObserveEndpointResult is every requested revision, in request order.
type ObserveEndpointResult struct {
	Revisions []RevisionObservation `json:"revisions"`
	// Held is how many requests the endpoint's proxy holds because no
	// replica is ready (the 0→1 signal), at the time of the observation.
	Held int       `json:"held,omitempty"`
	At   time.Time `json:"at"`
}

// RevisionLayout is one revision's part of a layout: its deployment
// revision number, its spec (what replicas run) and its replica count.
type RevisionLayout struct {
	Revision int                    `json:"revision"`
	Spec     inference.EndpointSpec `json:"spec"`
	Replicas int                    `json:"replicas"`
}

// ApplyEndpointLayoutRequest sets replicas and traffic. Revisions not
// listed are left alone (DeleteEndpointRevisions removes them).
// ScaleDownFirst orders the writes surge-free (see inference.Step).
type ApplyEndpointLayoutRequest struct {
	EndpointRef
	Revisions      []RevisionLayout           `json:"revisions"`
	Traffic        []inference.RevisionWeight `json:"traffic"`
	ScaleDownFirst bool                       `json:"scaleDownFirst,omitempty"`
}

// ApplyEndpointLayoutResult says how traffic is split where the endpoint
// runs: "gateway-api" (weighted HTTPRoute), "replica-ratio" (one Service
// over every revision's pods) or "proxy" (the local runtime's proxy).
type ApplyEndpointLayoutResult struct {
	TrafficMode string `json:"trafficMode"`
}

// DeleteEndpointRevisionsRequest removes revisions' replicas and routes.
type DeleteEndpointRevisionsRequest struct {
	EndpointRef
	Revisions []int `json:"revisions"`
}
