package telemetry

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Type is a family's Prometheus type.
type Type int

// Family types.
const (
	Counter Type = iota
	Gauge
	Histogram
)

func (t Type) String() string {
	switch t {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	default:
		return "histogram"
	}
}

// Family is one metric Atelier exports. Emitters construct their
// collectors from it (the gateway's HTTP metrics, the proxy's), or emit it
// by name through the SDK handler (workflow code), so name, help and labels
// are written once.
type Family struct {
	Name string
	Type Type
	Help string
	// Labels every series has.
	Labels []string
	// TenantLabels are added only with Options.TenantLabels (their values
	// grow with the number of projects and endpoints).
	TenantLabels []string
	// Buckets of a histogram, in seconds; nil: prometheus.DefBuckets.
	Buckets []float64
}

// LabelNames are the family's labels with or without the tenant labels.
func (f Family) LabelNames(tenant bool) []string {
	if !tenant {
		return slices.Clone(f.Labels)
	}
	return append(slices.Clone(f.Labels), f.TenantLabels...)
}

// NewCounterVec builds the family as a counter vector.
func (f Family) NewCounterVec(tenant bool) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: f.Name, Help: f.Help}, f.LabelNames(tenant))
}

// NewCounter builds a family without labels as one counter.
func (f Family) NewCounter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: f.Name, Help: f.Help})
}

// NewGauge builds a family without labels as one gauge.
func (f Family) NewGauge() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: f.Name, Help: f.Help})
}

// NewHistogramVec builds the family as a histogram vector.
func (f Family) NewHistogramVec(tenant bool) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: f.Name, Help: f.Help, Buckets: f.buckets()}, f.LabelNames(tenant))
}

func (f Family) buckets() []float64 {
	if f.Buckets == nil {
		return prometheus.DefBuckets
	}
	return f.Buckets
}

// Bucket layouts.
var (
	// longBuckets cover steps and runs: a second to a day.
	longBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400}
	// waitBuckets cover queue waits: 10 ms (an idle worker) to an hour (a
	// saturated one).
	waitBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	// sdkBuckets cover the Temporal SDK's latencies (a workflow task in
	// milliseconds, a long poll up to a minute).
	sdkBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
)

// The gateway's families (api).
var (
	HTTPRequests = Family{Name: "atelier_http_requests_total", Type: Counter,
		Help:   "HTTP requests by method, route template and status.",
		Labels: []string{"method", "route", "status"}}
	HTTPRequestDuration = Family{Name: "atelier_http_request_duration_seconds", Type: Histogram,
		Help:   "HTTP request latency by method, route template and status (streams: whole stream).",
		Labels: []string{"method", "route", "status"}}
	APIRunsStarted = Family{Name: "atelier_runs_started_total", Type: Counter,
		Help:   "Runs started through the API, by kind (pipeline, workflow or retry). Runs begun by any means: atelier_runs_begun_total.",
		Labels: []string{"kind"}}
	StreamStatusPolls = Family{Name: "atelier_stream_status_polls_total", Type: Counter,
		Help: "Status polls made for event and log-follow streams (one per followed run per interval, however many streams follow it)."}
	StreamsOpen = Family{Name: "atelier_streams_open", Type: Gauge,
		Help: "Event and log-follow streams open now."}
)

// Names of the families workflow code emits by name through
// workflow.GetMetricsHandler (constants, so workflow code reads no
// package state).
const (
	MetricRunsBegun               = "atelier_runs_begun_total"
	MetricRunsFinished            = "atelier_runs_finished_total"
	MetricRunDuration             = "atelier_run_duration_seconds"
	MetricStepsStarted            = "atelier_steps_started_total"
	MetricStepsFinished           = "atelier_steps_finished_total"
	MetricStepDuration            = "atelier_step_duration_seconds"
	MetricStepAttemptsStarted     = "atelier_step_attempts_started_total"
	MetricStepAttemptsFinished    = "atelier_step_attempts_finished_total"
	MetricStepQueueWait           = "atelier_step_queue_wait_seconds"
	MetricGPUWorkloadsSubmitted   = "atelier_gpu_workloads_submitted_total"
	MetricGPUWorkloadsAdmitted    = "atelier_gpu_workloads_admitted_total"
	MetricGPUWorkloadsPreempted   = "atelier_gpu_workloads_preempted_total"
	MetricGPUQueueLength          = "atelier_gpu_queue_length"
	MetricGPUWorkloadsRunning     = "atelier_gpu_workloads_running"
	MetricEndpointReplicasDesired = "atelier_endpoint_replicas_desired"
	MetricEndpointReplicasReady   = "atelier_endpoint_replicas_ready"
)

// Run and step families, emitted by workflow code through the SDK handler
// (workflows/metrics.go). kind is a run's "pipeline" (declarative) or
// "workflow" (native Go); a step's container, ray, spark, inference or
// approval. A forEach step is counted through its items.
var (
	RunsBegun = Family{Name: MetricRunsBegun, Type: Counter,
		Help:   "Runs whose workflow began, whatever started them (REST, a schedule, the Temporal SDK), by kind.",
		Labels: []string{"kind"}, TenantLabels: []string{"project"}}
	RunsFinished = Family{Name: MetricRunsFinished, Type: Counter,
		Help:   "Runs that ended, by kind and final state (SUCCEEDED, FAILED, CANCELLED); a run terminated through Temporal runs no end of its own and is not counted.",
		Labels: []string{"kind", "state"}, TenantLabels: []string{"project"}}
	RunDuration = Family{Name: MetricRunDuration, Type: Histogram,
		Help:   "Run duration from its workflow's start to its end, by kind and final state.",
		Labels: []string{"kind", "state"}, TenantLabels: []string{"project"}, Buckets: longBuckets}
	StepsStarted = Family{Name: MetricStepsStarted, Type: Counter,
		Help:   "Steps (and forEach items) whose first attempt was scheduled or, for approvals, that began waiting, by kind.",
		Labels: []string{"kind"}, TenantLabels: []string{"project"}}
	StepsFinished = Family{Name: MetricStepsFinished, Type: Counter,
		Help:   "Steps (and forEach items) that reached a final state (SUCCEEDED, FAILED, CANCELLED, SKIPPED, CACHED), by kind and state.",
		Labels: []string{"kind", "state"}, TenantLabels: []string{"project"}}
	StepDuration = Family{Name: MetricStepDuration, Type: Histogram,
		Help:   "Step duration from its first attempt's scheduling to its final state, all attempts and retry backoffs included, by kind and final state.",
		Labels: []string{"kind", "state"}, TenantLabels: []string{"project"}, Buckets: longBuckets}
	StepAttemptsStarted = Family{Name: MetricStepAttemptsStarted, Type: Counter,
		Help:   "Step attempts scheduled, by step kind.",
		Labels: []string{"kind"}, TenantLabels: []string{"project"}}
	StepAttemptsFinished = Family{Name: MetricStepAttemptsFinished, Type: Counter,
		Help:   "Step attempts that ended, by step kind and outcome (SUCCEEDED, FAILED, CANCELLED; a preempted attempt is CANCELLED).",
		Labels: []string{"kind", "state"}, TenantLabels: []string{"project"}}
	StepQueueWait = Family{Name: MetricStepQueueWait, Type: Histogram,
		Help:   "Time from a step attempt being due (its dependencies done, or its retry backoff over) to it starting on a worker (the local process started, the Kubernetes object created), by step kind: the run's in-flight bound, the task queue and the worker's slots.",
		Labels: []string{"kind"}, TenantLabels: []string{"project"}, Buckets: waitBuckets}
)

// GPU admission families, emitted by the admission workflow per cluster
// (clusters are few: the cluster label is bounded).
var (
	GPUWorkloadsSubmitted = Family{Name: MetricGPUWorkloadsSubmitted, Type: Counter,
		Help:   "GPU workloads (steps and shared Ray clusters needing GPUs) submitted to a cluster's admission queue.",
		Labels: []string{"cluster"}}
	GPUWorkloadsAdmitted = Family{Name: MetricGPUWorkloadsAdmitted, Type: Counter,
		Help:   "GPU workloads admitted by a cluster's admission.",
		Labels: []string{"cluster"}}
	GPUWorkloadsPreempted = Family{Name: MetricGPUWorkloadsPreempted, Type: Counter,
		Help:   "Admitted GPU workloads a cluster's admission told to give their GPUs back, by reason (ReclaimQuota, Priority).",
		Labels: []string{"cluster", "reason"}}
	GPUQueueLength = Family{Name: MetricGPUQueueLength, Type: Gauge,
		Help:   "GPU workloads waiting for admission on a cluster, as of its admission workflow's last decision on this worker.",
		Labels: []string{"cluster"}}
	GPUWorkloadsRunning = Family{Name: MetricGPUWorkloadsRunning, Type: Gauge,
		Help:   "Admitted GPU workloads holding GPUs on a cluster, as of its admission workflow's last decision on this worker.",
		Labels: []string{"cluster"}}
)

// Inference serving families: the endpoint workflows' replica counts
// (labelled by endpoint, "project/name": endpoints are long-lived and
// few), and the gateway proxy's traffic (tenant labels only on request).
var (
	EndpointReplicasDesired = Family{Name: MetricEndpointReplicasDesired, Type: Gauge,
		Help:   "Replicas an inference endpoint's workflow wants for its serving revision, as of its last tick on this worker.",
		Labels: []string{"endpoint"}}
	EndpointReplicasReady = Family{Name: MetricEndpointReplicasReady, Type: Gauge,
		Help:   "Ready replicas of an inference endpoint (all revisions), as of its workflow's last tick on this worker.",
		Labels: []string{"endpoint"}}
	EndpointRequests = Family{Name: "atelier_endpoint_requests_total", Type: Counter,
		Help:   "Requests the gateway forwarded to inference endpoints, by response class (2xx, 4xx, 5xx; 5xx includes unreachable replicas).",
		Labels: []string{"code"}, TenantLabels: []string{"endpoint", "revision"}}
	EndpointRequestDuration = Family{Name: "atelier_endpoint_request_duration_seconds", Type: Histogram,
		Help:   "Latency of requests the gateway forwarded to inference endpoints (time held waiting for a replica included).",
		Labels: []string{"code"}, TenantLabels: []string{"endpoint", "revision"}}
)

// Families is every family Atelier exports itself.
var Families = []Family{
	HTTPRequests, HTTPRequestDuration, APIRunsStarted, StreamStatusPolls, StreamsOpen,
	RunsBegun, RunsFinished, RunDuration, StepsStarted, StepsFinished, StepDuration,
	StepAttemptsStarted, StepAttemptsFinished, StepQueueWait,
	GPUWorkloadsSubmitted, GPUWorkloadsAdmitted, GPUWorkloadsPreempted, GPUQueueLength, GPUWorkloadsRunning,
	EndpointReplicasDesired, EndpointReplicasReady, EndpointRequests, EndpointRequestDuration,
}

// SDKMetrics are the Temporal Go SDK metrics the docs and the Grafana
// dashboard rely on, as exported here (counters with _total, timers as
// histograms in _seconds); the integration test checks each appears after
// a run. The SDK emits more (see its documentation), all exported.
var SDKMetrics = []Family{
	{Name: "temporal_workflow_task_execution_latency_seconds", Type: Histogram},
	{Name: "temporal_workflow_task_schedule_to_start_latency_seconds", Type: Histogram},
	{Name: "temporal_activity_execution_latency_seconds", Type: Histogram},
	{Name: "temporal_activity_schedule_to_start_latency_seconds", Type: Histogram},
	{Name: "temporal_workflow_completed_total", Type: Counter},
	{Name: "temporal_request_total", Type: Counter},
	{Name: "temporal_worker_task_slots_available", Type: Gauge},
}
