package activities

import (
	"time"

	"github.com/atelier-ml/atelier/inference"
)

// Activity names of inference serving on Kubernetes (package
// activities/kube/serving). A cluster's worker registers them on its
// cluster task queue (TaskQueueForCluster). The endpoint's entity workflow
// calls them; nothing else writes an endpoint's objects.
const (
	ApplyServingRevisionName   = "atelier.serving.revision.apply"
	ScaleServingRevisionName   = "atelier.serving.revision.scale"
	ObserveServingRevisionName = "atelier.serving.revision.observe"
	DeleteServingRevisionName  = "atelier.serving.revision.delete"
	ApplyServingTrafficName    = "atelier.serving.traffic.apply"
	DeleteServingEndpointName  = "atelier.serving.endpoint.delete"
	ScrapeServingMetricsName   = "atelier.serving.metrics.scrape"
)

// Traffic modes: how an endpoint's traffic is split between revisions.
const (
	// TrafficGatewayAPI: a Gateway API HTTPRoute sends each revision its
	// weight, whatever its replica count.
	TrafficGatewayAPI = "gateway-api"
	// TrafficReplicaRatio: the endpoint's Service balances over the ready
	// pods of the revisions it selects, so each gets a share proportional
	// to its ready replicas; the weights only choose which revisions are
	// selected.
	TrafficReplicaRatio = "replica-ratio"
)

// ServingRevisionRef names one revision of an endpoint.
type ServingRevisionRef struct {
	Project  string `json:"project"`
	Endpoint string `json:"endpoint"`
	Revision int    `json:"revision"`
}

// ApplyServingRevisionRequest makes a revision's Deployment match its spec
// with Replicas replicas (created when missing). Spec is the revision's
// spec as recorded (inference.Revision.Spec, defaults applied).
type ApplyServingRevisionRequest struct {
	ServingRevisionRef
	Spec     inference.EndpointSpec `json:"spec"`
	Replicas int                    `json:"replicas"`
}

// ServingObjectResult names an object the activity applied.
type ServingObjectResult struct {
	Namespace string `json:"namespace"`
	Object    string `json:"object"` // "<kind>/<name>", e.g. "deployment/llama-r2-1a2b3c4d5e"
	// Changed is false when the live object already matched.
	Changed bool `json:"changed"`
}

// ScaleServingRevisionRequest sets a revision's replica count. Scaling a
// missing revision to 0 succeeds (there is nothing to run); to more fails
// as InvalidStep (apply the revision first).
type ScaleServingRevisionRequest struct {
	ServingRevisionRef
	Replicas int `json:"replicas"`
}

// ObserveServingRevisionRequest reads a revision's replicas.
type ObserveServingRevisionRequest struct {
	ServingRevisionRef
	// RestartThreshold counts a replica as crash-looping once its
	// container restarted this many times, even between back-offs; 0
	// counts only replicas in CrashLoopBackOff.
	RestartThreshold int `json:"restartThreshold,omitempty"`
}

// ObserveServingRevisionResult is what the cluster shows of a revision.
type ObserveServingRevisionResult struct {
	Namespace  string    `json:"namespace"`
	Deployment string    `json:"deployment"`
	Exists     bool      `json:"exists"`
	ObservedAt time.Time `json:"observedAt"`
	// Desired is the Deployment's replica count.
	Desired int `json:"desired"`
	// Ready, CrashLooping and Replicas count pods that are not being
	// deleted; Terminating counts those that are (their GPUs are not yet
	// free: a surge-free rollout waits for them).
	Ready        int                         `json:"ready"`
	CrashLooping int                         `json:"crashLooping,omitempty"`
	Terminating  int                         `json:"terminating,omitempty"`
	Replicas     []ServingReplicaObservation `json:"replicas,omitempty"`
	// Unschedulable is the scheduler's reason for the first pod it cannot
	// place ("0/10 nodes are available: 10 Insufficient nvidia.com/gpu."),
	// Stuck the first pod that cannot start for a reason that rarely
	// resolves itself (ErrImagePull, CreateContainerConfigError, ...).
	Unschedulable *ServingPodProblem `json:"unschedulable,omitempty"`
	Stuck         *ServingPodProblem `json:"stuck,omitempty"`
}

// ServingReplicaObservation is one replica (pod) and its startup phases.
// Scheduled is the PodScheduled condition's time; ImagePulled when the
// container started (the image was there); EngineReady when the pod became
// Ready (the readiness probe passed). A phase not reached is zero.
type ServingReplicaObservation struct {
	inference.ReplicaStartup
	Node         string `json:"node,omitempty"`
	Ready        bool   `json:"ready"`
	Restarts     int    `json:"restarts,omitempty"`
	CrashLooping bool   `json:"crashLooping,omitempty"`
	// Waiting is the container's waiting reason (ContainerCreating,
	// CrashLoopBackOff, ImagePullBackOff, ...), or the scheduler's
	// "Unschedulable".
	Waiting string `json:"waiting,omitempty"`
	Message string `json:"message,omitempty"`
}

// ServingPodProblem is why a pod of a revision cannot run.
type ServingPodProblem struct {
	Pod     string `json:"pod"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Startup returns the replicas' startup milestones, for
// inference.CheckStartup and RevisionStatus.Startup.
func (r ObserveServingRevisionResult) Startup() []inference.ReplicaStartup {
	out := make([]inference.ReplicaStartup, 0, len(r.Replicas))
	for _, rep := range r.Replicas {
		out = append(out, rep.ReplicaStartup)
	}
	return out
}

// Status returns the replica part of an inference.RevisionStatus; the
// caller adds the traffic figures (MetricsKnown, Requests, Errors,
// P99LatencyMs) from its scrapes.
func (r ObserveServingRevisionResult) Status() inference.RevisionStatus {
	return inference.RevisionStatus{Ready: r.Ready, CrashLooping: r.CrashLooping, Startup: r.Startup()}
}

// DeleteServingRevisionRequest deletes a revision's Deployment and
// Service. Take it out of the traffic weights first.
type DeleteServingRevisionRequest = ServingRevisionRef

// DeleteServingEndpointRequest deletes every object of an endpoint.
type DeleteServingEndpointRequest struct {
	Project  string `json:"project"`
	Endpoint string `json:"endpoint"`
}

// ServingDeleteResult lists what was deleted ("<kind>/<name>").
type ServingDeleteResult struct {
	Deleted []string `json:"deleted,omitempty"`
}

// ApplyServingTrafficRequest splits an endpoint's traffic between
// revisions: Weights sum to 100, or are empty (nothing serves). Backend
// gives the ports. Hostnames, optional, are the HTTPRoute's hostnames.
type ApplyServingTrafficRequest struct {
	Project   string                     `json:"project"`
	Endpoint  string                     `json:"endpoint"`
	Backend   inference.Backend          `json:"backend"`
	Weights   []inference.RevisionWeight `json:"weights,omitempty"`
	Hostnames []string                   `json:"hostnames,omitempty"`
}

// ApplyServingTrafficResult says how traffic is split.
type ApplyServingTrafficResult struct {
	Namespace string `json:"namespace"`
	// Mode is TrafficGatewayAPI or TrafficReplicaRatio; ModeReason says
	// why (shown on the endpoint).
	Mode       string `json:"mode"`
	ModeReason string `json:"modeReason"`
	// Service is the endpoint's stable Service, the in-cluster address
	// (http://<service>.<namespace>.svc:<port>); Route the HTTPRoute in
	// gateway-api mode.
	Service string `json:"service"`
	Route   string `json:"route,omitempty"`
	// Selected are the revisions the stable Service sends traffic to:
	// the only revision with weight when there is one, otherwise every
	// revision of the endpoint (a Service cannot select a set of them).
	Selected []int `json:"selected,omitempty"`
	// Objects are the applied objects; Changed whether any was written.
	Objects []string `json:"objects"`
	Changed bool     `json:"changed"`
}

// ScrapeServingMetricsRequest scrapes a revision's replicas. Without
// Targets, the ready pods of the revision are scraped at their IP on the
// backend's metrics port; Targets (full URLs) replace them (a metrics
// gateway, or a test's in-process server where pods have no real
// containers). Names are the metric families to keep (a histogram's
// family covers its _bucket, _sum and _count); empty keeps the backend's
// queue and KV-cache gauges.
type ScrapeServingMetricsRequest struct {
	ServingRevisionRef
	Backend inference.Backend `json:"backend"`
	Targets []string          `json:"targets,omitempty"`
	Names   []string          `json:"names,omitempty"`
	// Timeout bounds each scrape (default 5s).
	Timeout time.Duration `json:"timeout,omitempty"`
}

// ScrapeServingMetricsResult holds one scrape per target.
type ScrapeServingMetricsResult struct {
	Scrapes []ServingScrape `json:"scrapes"`
}

// ServingScrape is one target's scrape. Error is set (and Samples empty)
// when it failed: the replica's signal is then unknown, never zero.
type ServingScrape struct {
	Target  string             `json:"target"`
	Replica string             `json:"replica,omitempty"` // pod name, when scraped from pods
	At      time.Time          `json:"at"`
	Samples []inference.Sample `json:"samples,omitempty"`
	Error   string             `json:"error,omitempty"`
}
