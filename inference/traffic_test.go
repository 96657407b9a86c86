package inference_test

import (
	"math"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/inference"
)

func TestLatencyHistogramQuantileErrsSlow(t *testing.T) {
	var h inference.LatencyHistogram
	if q := h.Quantile(0.99); !math.IsNaN(q) {
		t.Fatalf("empty p99 = %v, want NaN (unknown)", q)
	}
	for range 98 {
		h.Observe(3 * time.Millisecond)
	}
	h.Observe(40 * time.Millisecond)
	h.Observe(700 * time.Millisecond)
	if q := h.Quantile(0.5); q != 5 {
		t.Errorf("p50 = %v, want 5 (the bucket's upper bound)", q)
	}
	if q := h.Quantile(0.99); q != 50 {
		t.Errorf("p99 = %v, want 50", q)
	}
	if q := h.Quantile(1); q != 1000 {
		t.Errorf("max = %v, want 1000", q)
	}
	var sum inference.LatencyHistogram
	sum.Add(h)
	sum.Add(h)
	if sum.Total() != 200 || sum.Quantile(0.99) != 50 {
		t.Errorf("sum: %d requests, p99 %v", sum.Total(), sum.Quantile(0.99))
	}
	var slow inference.LatencyHistogram
	slow.Observe(2 * time.Minute)
	if !math.IsInf(slow.Quantile(0.99), 1) {
		t.Errorf("overflow p99 = %v, want +Inf", slow.Quantile(0.99))
	}
}

// A window the proxy reported on feeds the traffic gates; a slow overflow
// p99 is a finite figure that fails any sane latency gate.
func TestTrafficWindowFeedsGates(t *testing.T) {
	w := inference.TrafficWindow{Revision: 2}
	var lat inference.LatencyHistogram
	for range 20 {
		lat.Observe(2 * time.Minute)
	}
	w.Add(inference.RevisionTraffic{Revision: 2, Requests: 20, Errors: 3, Latency: lat})
	st := w.Status(inference.RevisionStatus{Ready: 1})
	g := inference.GateSettings{MinSamples: 10, MaxErrorRate: 0.05, MaxP99LatencyMs: 2000}
	for _, r := range inference.TrafficGates(g, st) {
		if r.Verdict != inference.VerdictFail {
			t.Errorf("%s: %s, want Fail (%s)", r.Gate, r.Verdict, r.Message())
		}
	}
	empty := inference.TrafficWindow{Revision: 2}.Status(inference.RevisionStatus{})
	for _, r := range inference.TrafficGates(g, empty) {
		if r.Verdict != inference.VerdictInsufficient {
			t.Errorf("no requests: %s is %s, want InsufficientSamples", r.Gate, r.Verdict)
		}
	}
}
