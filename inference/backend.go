package inference

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// BackendInfo is what Atelier needs to know about a serving engine: where
// it listens, how to tell it is ready, and which metrics measure its
// queue. It is data so that activities (probes, Services, scrapes) and
// this package's logic read the same facts.
type BackendInfo struct {
	Backend Backend
	// HTTPPort serves inference and readiness; GRPCPort is 0 when the
	// engine has none; MetricsPort serves MetricsPath in Prometheus text.
	HTTPPort, GRPCPort, MetricsPort int
	MetricsPath                     string
	// ReadinessPath answers 200 when the replica can serve. When
	// ReadinessListsModel is set, a 200 is not enough: the body must list
	// the served model (see ModelListed), because the engine answers
	// before the weights are loaded.
	ReadinessPath       string
	ReadinessListsModel bool
	// WaitingMetric is the gauge of requests queued in the engine;
	// RunningMetric the gauge of requests executing ("" when the engine
	// exports none); KVCacheMetrics the gauges of KV-cache usage (0..1),
	// newest name first.
	WaitingMetric  string
	RunningMetric  string
	KVCacheMetrics []string
	// DefaultTarget is the default Autoscaling.TargetQueuePerReplica.
	DefaultTarget float64
	// Reserved flags must not appear in EndpointSpec.Args: Atelier sets
	// them (or relies on their defaults) for probes, Services and metrics.
	Reserved []string
}

var backends = []BackendInfo{{
	Backend:  BackendTriton,
	HTTPPort: 8000, GRPCPort: 8001, MetricsPort: 8002, MetricsPath: "/metrics",
	// With --strict-readiness (the default) the server is ready only once
	// the models it loaded are ready.
	ReadinessPath: "/v2/health/ready",
	WaitingMetric: "nv_inference_pending_request_count",
	// Triton exports no gauge of executing requests: its load is the
	// pending count alone, hence a small default target.
	DefaultTarget: 4,
	Reserved: []string{"--model-control-mode", "--http-port", "--grpc-port", "--metrics-port",
		"--allow-http", "--allow-metrics", "--strict-readiness"},
}, {
	Backend:  BackendVLLM,
	HTTPPort: 8000, MetricsPort: 8000, MetricsPath: "/metrics",
	// /health answers as soon as the API server is up; /v1/models lists
	// the model only when the engine can serve it.
	ReadinessPath: "/v1/models", ReadinessListsModel: true,
	WaitingMetric:  "vllm:num_requests_waiting",
	RunningMetric:  "vllm:num_requests_running",
	KVCacheMetrics: []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
	// Continuous batching runs many sequences per replica; 32 in the
	// system per replica keeps latency reasonable for mid-size models.
	DefaultTarget: 32,
	Reserved:      []string{"--model", "--served-model-name", "--port", "--host"},
}}

// Info returns the facts about a backend; false for an unknown one.
func Info(b Backend) (BackendInfo, bool) {
	for _, i := range backends {
		if i.Backend == b {
			i.KVCacheMetrics = slices.Clone(i.KVCacheMetrics)
			i.Reserved = slices.Clone(i.Reserved)
			return i, true
		}
	}
	return BackendInfo{}, false
}

// DefaultArgs are the engine arguments Atelier derives from the spec:
//
//	triton: --model-repository=<uri> --model-control-mode=explicit --load-model=<name>
//	vllm:   --model <uri or name> [--served-model-name <name>] --port 8000
//
// Explicit model control makes Triton load only the named model, so its
// readiness means that model is loaded.
func DefaultArgs(s EndpointSpec) []string {
	switch s.Backend {
	case BackendTriton:
		return []string{"--model-repository=" + s.Model.URI, "--model-control-mode=explicit", "--load-model=" + s.Model.Name}
	case BackendVLLM:
		model := s.Model.URI
		if model == "" {
			model = s.Model.Name
		}
		args := []string{"--model", model}
		if s.Model.URI != "" && s.Model.Name != "" {
			args = append(args, "--served-model-name", s.Model.Name)
		}
		return append(args, "--port", "8000")
	}
	return nil
}

// ContainerArgs is the full argument list of the serving container: the
// defaults, then the user's Args.
func ContainerArgs(s EndpointSpec) []string {
	return append(DefaultArgs(s), s.Args...)
}

// reservedFlag returns the reserved flag arg sets ("--port" for "--port"
// or "--port=9000"), or "".
func reservedFlag(info BackendInfo, arg string) string {
	for _, f := range info.Reserved {
		if arg == f || strings.HasPrefix(arg, f+"=") {
			return f
		}
	}
	return ""
}

// ModelListed reads the body of vLLM's /v1/models (OpenAI format,
// {"data":[{"id":...}]}) and reports whether model is listed.
func ModelListed(body []byte, model string) (bool, error) {
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return false, fmt.Errorf("inference: reading the model list: %w", err)
	}
	for _, m := range list.Data {
		if m.ID == model {
			return true, nil
		}
	}
	return false, nil
}

// Sample is one series of a scrape: a metric name, its labels rendered in
// any canonical form (used only to order samples) and its value.
type Sample struct {
	Name   string
	Labels string
	Value  float64
}

// QueueSignal is one replica's load as the autoscaler reads it. Known is
// false when the scrape lacked the backend's queue metrics: such a signal
// is unknown, never zero.
type QueueSignal struct {
	Waiting float64 `json:"waiting"`
	Running float64 `json:"running"`
	// KVCacheUsage (0..1) is informational; 0 when not reported.
	KVCacheUsage float64 `json:"kvCacheUsage,omitempty"`
	Known        bool    `json:"known"`
}

// Load is the number of requests the replica holds: executing plus
// waiting. Waiting alone drops to zero exactly when capacity is right,
// which would make the autoscaler oscillate.
func (q QueueSignal) Load() float64 { return q.Waiting + q.Running }

// Signal normalises one scrape of a replica into a QueueSignal. Series of
// the same metric (per model, per engine) are summed, KV-cache usage takes
// the highest series; NaN, infinite and negative values count as absent.
// The samples are sorted first, so the float sums do not depend on their
// order. Known requires the waiting metric and, when the backend has one,
// the running metric.
func Signal(b Backend, samples []Sample) QueueSignal {
	info, ok := Info(b)
	if !ok {
		return QueueSignal{}
	}
	sorted := slices.Clone(samples)
	slices.SortFunc(sorted, func(x, y Sample) int {
		return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.Labels, y.Labels), cmp.Compare(x.Value, y.Value))
	})
	var q QueueSignal
	var haveWaiting, haveRunning bool
	for _, s := range sorted {
		if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) || s.Value < 0 {
			continue
		}
		switch {
		case s.Name == info.WaitingMetric:
			q.Waiting += s.Value
			haveWaiting = true
		case info.RunningMetric != "" && s.Name == info.RunningMetric:
			q.Running += s.Value
			haveRunning = true
		case slices.Contains(info.KVCacheMetrics, s.Name):
			q.KVCacheUsage = max(q.KVCacheUsage, s.Value)
		}
	}
	q.Known = haveWaiting && (info.RunningMetric == "" || haveRunning)
	if !q.Known {
		return QueueSignal{KVCacheUsage: q.KVCacheUsage}
	}
	return q
}
