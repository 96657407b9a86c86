package telemetry_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/platform/telemetry/telemetrytest"
)

// The SDK's metrics are exported as the SDK's Prometheus users know them,
// whatever tag sets one name is emitted with, and one scrape never fails.
func TestSDKHandlerExportsSDKMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := telemetry.NewSDKHandler(reg, telemetry.Options{})
	wf := h.WithTags(map[string]string{"namespace": "atelier", "task_queue": "q", "workflow_type": "atelier.Pipeline"})
	wf.Counter("temporal_workflow_completed").Inc(1)
	wf.Counter("temporal_workflow_completed").Inc(2)
	wf.Counter("temporal_workflow_completed").Inc(-5) // never down
	wf.Timer("temporal_workflow_task_execution_latency").Record(20 * time.Millisecond)
	h.WithTags(map[string]string{"operation": "StartWorkflowExecution"}).Counter("temporal_request").Inc(1)
	// The same name with another tag set, and tags overwritten.
	h.WithTags(map[string]string{"operation": "x", "namespace": "a"}).WithTags(map[string]string{"namespace": "b", "bad-key": "v\xff"}).Counter("temporal_request").Inc(1)
	h.WithTags(map[string]string{"worker_type": "ActivityWorker"}).Gauge("temporal_worker_task_slots_available").Update(7)

	v, err := telemetrytest.Gather(reg)
	require.NoError(t, err)
	assert.Equal(t, 3.0, v[telemetrytest.Series("temporal_workflow_completed_total", "namespace", "atelier", "task_queue", "q", "workflow_type", "atelier.Pipeline")])
	assert.Equal(t, 1.0, v[telemetrytest.Series("temporal_workflow_task_execution_latency_seconds_count", "namespace", "atelier", "task_queue", "q", "workflow_type", "atelier.Pipeline")])
	assert.InDelta(t, 0.02, v[telemetrytest.Series("temporal_workflow_task_execution_latency_seconds_sum", "namespace", "atelier", "task_queue", "q", "workflow_type", "atelier.Pipeline")], 1e-9)
	assert.Equal(t, 1.0, v[telemetrytest.Series("temporal_request_total", "operation", "StartWorkflowExecution")])
	assert.Equal(t, 1.0, v[telemetrytest.Series("temporal_request_total", "bad_key", "v?", "namespace", "b", "operation", "x")])
	assert.Equal(t, 7.0, v[telemetrytest.Series("temporal_worker_task_slots_available", "worker_type", "ActivityWorker")])
}

// Atelier's families keep exactly their labels: the tags the SDK adds in
// workflow code are dropped, a missing one is empty, and project appears
// only with tenant labels.
func TestSDKHandlerKeepsFamilyLabels(t *testing.T) {
	for _, tenant := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		h := telemetry.NewSDKHandler(reg, telemetry.Options{TenantLabels: tenant})
		wf := h.WithTags(map[string]string{"namespace": "atelier", "task_queue": "q", "workflow_type": "atelier.Pipeline", "project": "vision"})
		wf.WithTags(map[string]string{"kind": "container", "state": "SUCCEEDED"}).Counter(telemetry.MetricStepsFinished).Inc(1)
		wf.WithTags(map[string]string{"state": "FAILED"}).Counter(telemetry.MetricStepsFinished).Inc(1)
		wf.WithTags(map[string]string{"kind": "container"}).Timer(telemetry.MetricStepQueueWait).Record(time.Second)
		// A family used as the wrong type is ignored, not a panic.
		wf.Gauge(telemetry.MetricStepsFinished).Update(3)

		v, err := telemetrytest.Gather(reg)
		require.NoError(t, err)
		var tl []string
		if tenant {
			tl = []string{"project", "vision"}
		}
		assert.Equal(t, 1.0, v[telemetrytest.Series("atelier_steps_finished_total", append([]string{"kind", "container", "state", "SUCCEEDED"}, tl...)...)], "tenant=%v: %v", tenant, v)
		assert.Equal(t, 1.0, v[telemetrytest.Series("atelier_steps_finished_total", append([]string{"kind", "", "state", "FAILED"}, tl...)...)])
		assert.Equal(t, 1.0, v[telemetrytest.Series("atelier_step_queue_wait_seconds_count", append([]string{"kind", "container"}, tl...)...)])
		assert.Equal(t, 2.0, v.Sum("atelier_steps_finished_total"))
	}
}

// Every family is declared once, with a valid Prometheus name of the
// right suffix, and builds into a collector.
func TestFamiliesAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range telemetry.Families {
		assert.False(t, seen[f.Name], "%s declared twice", f.Name)
		seen[f.Name] = true
		assert.NotEmpty(t, f.Help, f.Name)
		switch f.Type {
		case telemetry.Counter:
			assert.Regexp(t, `^atelier_[a-z_]+_total$`, f.Name)
		case telemetry.Histogram:
			assert.Regexp(t, `^atelier_[a-z_]+_seconds$`, f.Name)
		default:
			assert.Regexp(t, `^atelier_[a-z_]+$`, f.Name)
		}
		reg := prometheus.NewRegistry()
		var c prometheus.Collector
		switch {
		case f.Type == telemetry.Counter && len(f.Labels) == 0:
			c = f.NewCounter()
		case f.Type == telemetry.Counter:
			c = f.NewCounterVec(true)
		case f.Type == telemetry.Histogram:
			c = f.NewHistogramVec(true)
		case len(f.Labels) == 0:
			c = f.NewGauge()
		default:
			continue // gauges with labels are emitted through the SDK handler
		}
		assert.NoError(t, reg.Register(c), f.Name)
	}
}

// What a workflow pays per emitted event (tags added, then a counter and a
// timer), as in workflows/metrics.go.
func BenchmarkSDKHandlerStepEvent(b *testing.B) {
	h := telemetry.NewSDKHandler(prometheus.NewRegistry(), telemetry.Options{})
	wf := h.WithTags(map[string]string{"namespace": "atelier", "task_queue": "atelier-local", "workflow_type": "atelier.Pipeline"})
	b.ReportAllocs()
	for b.Loop() {
		e := wf.WithTags(map[string]string{"kind": "container", "state": "SUCCEEDED", "project": "p"})
		e.Counter(telemetry.MetricStepsFinished).Inc(1)
		e.Timer(telemetry.MetricStepDuration).Record(time.Second)
	}
}
