package modelserver

import (
	"bytes"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Metric names, as the real servers spell them.
const (
	MetricVLLMRunning        = "vllm:num_requests_running"
	MetricVLLMWaiting        = "vllm:num_requests_waiting"
	MetricVLLMKVCacheUsage   = "vllm:kv_cache_usage_perc"
	MetricVLLMRequestSuccess = "vllm:request_success_total"
	MetricVLLMPromptTokens   = "vllm:prompt_tokens_total"
	MetricVLLMGenTokens      = "vllm:generation_tokens_total"
	MetricVLLME2ELatency     = "vllm:e2e_request_latency_seconds"

	MetricTritonPending       = "nv_inference_pending_request_count"
	MetricTritonSuccess       = "nv_inference_request_success"
	MetricTritonFailure       = "nv_inference_request_failure"
	MetricTritonCount         = "nv_inference_count"
	MetricTritonDurationUS    = "nv_inference_request_duration_us"
	MetricTritonQueueDuration = "nv_inference_queue_duration_us"
)

// latencyBuckets are vLLM's e2e latency buckets with four finer ones in
// front, since a fake's service times are usually milliseconds.
var latencyBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
	20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}

// metrics are the counters behind /metrics, guarded by Server.mu.
type metrics struct {
	success       map[string]uint64 // by vLLM finish reason
	failed        uint64            // injected 500s
	rejected      uint64            // 429s
	promptTokens  uint64
	genTokens     uint64
	durationUS    uint64 // successful requests, arrival to answer
	queueUS       uint64 // successful requests, arrival to slot
	latencyCounts []uint64
	latencySum    float64
	latencyCount  uint64
}

func newMetrics() metrics {
	return metrics{
		success:       map[string]uint64{"stop": 0, "length": 0},
		latencyCounts: make([]uint64, len(latencyBuckets)),
	}
}

func (m *metrics) succeeded() uint64 {
	var n uint64
	for _, v := range m.success {
		n += v
	}
	return n
}

func (m *metrics) record(o outcome, queued, e2e time.Duration) {
	if !o.ok {
		m.failed++
		return
	}
	reason := o.finishReason
	if reason == "" {
		reason = "stop"
	}
	m.success[reason]++
	m.promptTokens += uint64(o.promptTokens)
	m.genTokens += uint64(o.genTokens)
	m.durationUS += uint64(e2e.Microseconds())
	m.queueUS += uint64(queued.Microseconds())
	sec := e2e.Seconds()
	for i, le := range latencyBuckets {
		if sec <= le {
			m.latencyCounts[i]++
		}
	}
	m.latencySum += sec
	m.latencyCount++
}

// MetricsHandler serves the metrics in the Prometheus text format (0.0.4),
// with the backend's metric names. It is mounted at GET /metrics unless
// Config.NoMetricsRoute is set.
func (s *Server) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.abortIfCrashed()
		var b bytes.Buffer
		s.mu.Lock()
		if s.cfg.Backend == BackendTriton {
			s.writeTritonMetricsLocked(&b)
		} else {
			s.writeVLLMMetricsLocked(&b)
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(b.Bytes())
	})
}

func (s *Server) writeVLLMMetricsLocked(b *bytes.Buffer) {
	// vLLM labels its series with engine and model_name.
	base := labels("engine", "0", "model_name", s.cfg.Model)
	family(b, MetricVLLMRunning, "gauge", "Number of requests in model execution batches.")
	sample(b, MetricVLLMRunning, base, float64(s.running))
	family(b, MetricVLLMWaiting, "gauge", "Number of requests waiting to be processed.")
	sample(b, MetricVLLMWaiting, base, float64(len(s.queue)))
	family(b, MetricVLLMKVCacheUsage, "gauge", "KV-cache usage. 1 means 100 percent usage.")
	usage := 0.0
	if s.concurrency > 0 {
		usage = math.Min(1, float64(s.running)/float64(s.concurrency))
	}
	sample(b, MetricVLLMKVCacheUsage, base, usage)
	family(b, MetricVLLMRequestSuccess, "counter", "Count of successfully processed requests.")
	for _, reason := range []string{"length", "stop"} {
		sample(b, MetricVLLMRequestSuccess,
			labels("engine", "0", "finished_reason", reason, "model_name", s.cfg.Model), float64(s.m.success[reason]))
	}
	family(b, MetricVLLMPromptTokens, "counter", "Number of prefill tokens processed.")
	sample(b, MetricVLLMPromptTokens, base, float64(s.m.promptTokens))
	family(b, MetricVLLMGenTokens, "counter", "Number of generation tokens processed.")
	sample(b, MetricVLLMGenTokens, base, float64(s.m.genTokens))
	family(b, MetricVLLME2ELatency, "histogram", "Histogram of e2e request latency in seconds.")
	for i, le := range latencyBuckets {
		sample(b, MetricVLLME2ELatency+"_bucket",
			labels("engine", "0", "le", formatFloat(le), "model_name", s.cfg.Model), float64(s.m.latencyCounts[i]))
	}
	sample(b, MetricVLLME2ELatency+"_bucket",
		labels("engine", "0", "le", "+Inf", "model_name", s.cfg.Model), float64(s.m.latencyCount))
	sample(b, MetricVLLME2ELatency+"_count", base, float64(s.m.latencyCount))
	sample(b, MetricVLLME2ELatency+"_sum", base, s.m.latencySum)
}

func (s *Server) writeTritonMetricsLocked(b *bytes.Buffer) {
	l := labels("model", s.cfg.Model, "version", s.cfg.ModelVersion)
	ok := s.m.succeeded()
	family(b, MetricTritonSuccess, "counter", "Number of successful inference requests, all batch sizes")
	sample(b, MetricTritonSuccess, l, float64(ok))
	family(b, MetricTritonFailure, "counter", "Number of failed inference requests, all batch sizes")
	sample(b, MetricTritonFailure, l, float64(s.m.failed+s.m.rejected))
	family(b, MetricTritonCount, "counter", "Number of inferences performed (does not include cached requests)")
	sample(b, MetricTritonCount, l, float64(ok))
	family(b, MetricTritonDurationUS, "counter", "Cumulative inference request duration in microseconds (includes cached requests)")
	sample(b, MetricTritonDurationUS, l, float64(s.m.durationUS))
	family(b, MetricTritonQueueDuration, "counter", "Cumulative inference queuing duration in microseconds (includes cached requests)")
	sample(b, MetricTritonQueueDuration, l, float64(s.m.queueUS))
	family(b, MetricTritonPending, "gauge", "Instantaneous number of pending requests awaiting execution per-model.")
	sample(b, MetricTritonPending, l, float64(len(s.queue)))
}

func family(b *bytes.Buffer, name, typ, help string) {
	b.WriteString("# HELP " + name + " " + help + "\n")
	b.WriteString("# TYPE " + name + " " + typ + "\n")
}

func sample(b *bytes.Buffer, name, labels string, v float64) {
	b.WriteString(name + labels + " " + formatFloat(v) + "\n")
}

// labels renders name/value pairs as {a="x",b="y"}.
func labels(kv ...string) string {
	var sb strings.Builder
	sb.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(kv[i] + `="` + labelEscaper.Replace(kv[i+1]) + `"`)
	}
	sb.WriteByte('}')
	return sb.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
