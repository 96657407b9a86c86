package activities

import (
	"time"

	"github.com/atelier-ml/atelier/inference"
)

// Activity names of inference serving, called by the endpoint entity
// workflow (endpoint.Workflow) on the task queue of the runtime
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
	// the gates lack samples (inference.RolloutStep.Probes), for model ProbeModel
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
// ScaleDownFirst orders the writes surge-free (see inference.RolloutStep).
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

// Names of the endpoint entity workflow and its handlers. Stable: histories
// and clients refer to them.
const (
	EndpointWorkflowName = "atelier.Endpoint"
	// UpdateEndpointSpec submits a new spec (a Temporal Update; its
	// validator rejects an invalid spec with every problem, or a change of
	// what replicas run while a rollout is in progress). It answers the
	// revision that results.
	UpdateEndpointSpec = "atelier.endpoint.update"
	// UpdateEndpointRollback makes a new revision with an earlier one's
	// spec and rolls it out.
	UpdateEndpointRollback = "atelier.endpoint.rollback"
	// UpdateEndpointCommand promotes or aborts the rollout in progress.
	UpdateEndpointCommand = "atelier.endpoint.command"
	// UpdateEndpointDelete removes the endpoint; the workflow ends once
	// everything is deleted.
	UpdateEndpointDelete = "atelier.endpoint.delete"
	// QueryEndpointStatus answers an EndpointStatus.
	QueryEndpointStatus = "status"
	// SignalEndpointTraffic carries an EndpointTraffic from a gateway's
	// endpoint proxy (package inference/proxy).
	SignalEndpointTraffic = "atelier.endpoint.traffic"
)

// EndpointTraffic is what a gateway's endpoint proxy reports: the
// requests it holds now because no replica is ready (the 0→1 signal), and
// each revision's requests since its previous report.
type EndpointTraffic struct {
	Held      int                         `json:"held"`
	Revisions []inference.RevisionTraffic `json:"revisions,omitempty"`
}

// EndpointWorkflowID is the ID of the workflow that owns an endpoint: one
// per project and name, so a second create is refused by Temporal itself.
// The separator is '/', which neither a project nor an endpoint name may
// contain: with '-', project "a" endpoint "b-c" and project "a-b" endpoint
// "c" would share a workflow, and one tenant would read the other's.
func EndpointWorkflowID(project, name string) string {
	return "atelier-endpoint/" + project + "/" + name
}

// EndpointInput starts (or continues) an endpoint's workflow.
type EndpointInput struct {
	Project string `json:"project"`
	Name    string `json:"name"`
	// Spec is the first revision's spec (ignored when State is set).
	Spec inference.EndpointSpec `json:"spec"`
	// TaskQueue is where the endpoint's activities run: a cluster's queue
	// (activities.TaskQueueForCluster) or a local worker's.
	TaskQueue string `json:"taskQueue"`
	// Tick overrides endpoint.DefaultTick (tests).
	Tick time.Duration `json:"tick,omitempty"`
	// State carries the endpoint across continue-as-new.
	State *EndpointState `json:"state,omitempty"`
}

// EndpointState is everything the workflow remembers.
type EndpointState struct {
	Revisions []inference.Revision `json:"revisions"`
	// Current is the latest revision (what a GET shows as the spec);
	// Stable the deployment revision that serves: a revision that changes
	// only replicas, autoscaling or rollout settings keeps the replicas of
	// the revision it updates.
	Current int `json:"current"`
	Stable  int `json:"stable"`
	// Rollout is the rollout in progress (nil: none).
	Rollout *inference.Rollout `json:"rollout,omitempty"`
	// LastStep is the rollout's (or the steady state's) last instruction.
	LastStep    *inference.RolloutStep       `json:"lastStep,omitempty"`
	Scaler      inference.Autoscaler         `json:"scaler"`
	LastScale   *inference.Decision          `json:"lastScale,omitempty"`
	Replicas    []inference.RevisionReplicas `json:"replicas,omitempty"`
	Traffic     []inference.RevisionWeight   `json:"traffic,omitempty"`
	TrafficMode string                       `json:"trafficMode,omitempty"`
	// Observed is the last observation of each serving revision.
	Observed []RevisionObservation `json:"observed,omitempty"`
	Events   []EndpointEvent       `json:"events,omitempty"`
	Deleting bool                  `json:"deleting,omitempty"`
	// ModelMoved: the alias the latest revision follows (model.follow)
	// moved; the workflow resolves it again once no rollout is running.
	ModelMoved bool `json:"modelMoved,omitempty"`
	// FollowAfter delays the next resolution after one failed, so that an
	// unreachable catalogue costs the tick loop one try per interval.
	FollowAfter time.Time `json:"followAfter,omitempty"`
	// Command is a promote or abort waiting for the next rollout step.
	Command inference.Command `json:"command,omitempty"`
	// Held is how many requests the gateway's proxy held at HeldAt,
	// waiting for a ready replica.
	Held   int       `json:"held,omitempty"`
	HeldAt time.Time `json:"heldAt,omitzero"`
	// Window is the rollout candidate's traffic through the gateway's
	// proxy since the current step's MeasureFrom: what its error-rate
	// and latency gates judge.
	Window *inference.TrafficWindow `json:"window,omitempty"`
	// QuotaChecked is the last rollout candidate checked against the
	// project's GPU quota, Quota that check (nil: nothing to check).
	QuotaChecked int                   `json:"quotaChecked,omitempty"`
	Quota        *inference.QuotaCheck `json:"quota,omitempty"`
}

// EndpointEvent is one thing that happened to the endpoint, for its
// status and the REST events: revision created, rollout started, stage
// changed, promoted, rolled back, scaled, deleted.
type EndpointEvent struct {
	At       time.Time `json:"at"`
	Kind     string    `json:"kind"`
	Revision int       `json:"revision,omitempty"`
	Message  string    `json:"message"`
}

// EndpointStatus is the answer of QueryEndpointStatus.
type EndpointStatus struct {
	Project string `json:"project"`
	Name    string `json:"name"`
	// TaskQueue is where the endpoint's activities run (its input's): a
	// cluster's queue or, for an endpoint on the local runtime, a local
	// worker's. Empty in the answer of a worker from before it was
	// reported.
	TaskQueue string `json:"taskQueue,omitempty"`
	EndpointState
}

// EndpointCommand is the argument of UpdateEndpointCommand.
type EndpointCommand struct {
	Command inference.Command `json:"command"`
}

// ErrTypeInvalidEndpointSpec is the application error type of a refused
// spec; its details are the []schema.Problem, every one of them.
const ErrTypeInvalidEndpointSpec = "InvalidEndpointSpec"
