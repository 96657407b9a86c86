package inference

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/atelier-ml/atelier/schema"
)

func TestTrafficGates(t *testing.T) {
	g := GateSettings{MaxErrorRate: 0.05, MaxP99LatencyMs: 500, MinSamples: 100}
	tests := []struct {
		name string
		st   RevisionStatus
		want []Verdict // error rate, latency
	}{
		{"pass", RevisionStatus{MetricsKnown: true, Requests: 100, Errors: 5, P99LatencyMs: 500}, []Verdict{VerdictPass, VerdictPass}},
		{"fail both", RevisionStatus{MetricsKnown: true, Requests: 100, Errors: 6, P99LatencyMs: 501}, []Verdict{VerdictFail, VerdictFail}},
		{"too few samples is neither", RevisionStatus{MetricsKnown: true, Requests: 99, Errors: 99, P99LatencyMs: 9000}, []Verdict{VerdictInsufficient, VerdictInsufficient}},
		{"unknown metrics", RevisionStatus{Requests: 1000, Errors: 1000}, []Verdict{VerdictInsufficient, VerdictInsufficient}},
		{"NaN latency", RevisionStatus{MetricsKnown: true, Requests: 100, P99LatencyMs: math.NaN()}, []Verdict{VerdictPass, VerdictInsufficient}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Verdict
			for _, r := range TrafficGates(g, tt.st) {
				got = append(got, r.Verdict)
				if math.IsNaN(r.Value) {
					t.Errorf("%s: NaN value cannot be encoded", r.Gate)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("verdicts (-want +got):\n%s", diff)
			}
		})
	}
	if got := TrafficGates(GateSettings{MaxErrorRate: 1, MinSamples: 1}, RevisionStatus{}); len(got) != 0 {
		t.Errorf("disabled gates judged: %+v", got)
	}
}

func TestHealthGates(t *testing.T) {
	d := StartupDeadlines{Scheduled: schema.Duration(time.Minute), ImagePulled: schema.Duration(time.Minute), EngineReady: schema.Duration(time.Minute)}
	tests := []struct {
		name         string
		want         int
		unreadySince time.Time
		st           RevisionStatus
		ready, crash Verdict
		detail       string
	}{
		{"ready", 2, time.Time{}, RevisionStatus{Ready: 2}, VerdictPass, VerdictPass, ""},
		{"starting within the deadlines", 2, sec(0), RevisionStatus{Ready: 1}, VerdictPending, VerdictPass, ""},
		{"past the total budget", 2, sec(-180), RevisionStatus{Ready: 1}, VerdictFail, VerdictPass, "not ready within 3m0s"},
		{"a replica past its phase", 2, sec(0), RevisionStatus{Ready: 1, Startup: []ReplicaStartup{{Replica: "x", Created: sec(-90)}, {Replica: "y", Created: sec(-61)}}},
			VerdictFail, VerdictPass, "replica x did not reach Scheduled by 2026-11-23T11:59:30Z (and 1 more)"},
		{"crash loop", 1, time.Time{}, RevisionStatus{Ready: 1, CrashLooping: 1}, VerdictPass, VerdictFail, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := HealthGates(sec(0), d, tt.want, tt.unreadySince, tt.st)
			if got[0].Verdict != tt.ready || got[1].Verdict != tt.crash || got[0].Detail != tt.detail {
				t.Errorf("gates = %+v", got)
			}
		})
	}
}

// TestTrafficGatesNeverJudgeBelowMinimum: whatever the figures, a verdict
// other than InsufficientSamples needs MinSamples known requests, and a
// pass never hides a rate or latency above the threshold.
func TestTrafficGatesNeverJudgeBelowMinimum(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := GateSettings{MaxErrorRate: rapid.Float64Range(0.001, 0.999).Draw(t, "maxRate"),
			MaxP99LatencyMs: rapid.Float64Range(1, 1000).Draw(t, "maxP99"), MinSamples: rapid.IntRange(1, 1000).Draw(t, "min")}
		st := RevisionStatus{MetricsKnown: rapid.Bool().Draw(t, "known"), Requests: rapid.Int64Range(-5, 2000).Draw(t, "requests"),
			P99LatencyMs: rapid.SampledFrom([]float64{math.NaN(), -1, 0, 100, 999, 5000}).Draw(t, "p99")}
		st.Errors = rapid.Int64Range(0, max(st.Requests, 0)).Draw(t, "errors")
		for _, r := range TrafficGates(g, st) {
			enough := st.MetricsKnown && st.Requests >= int64(g.MinSamples)
			if r.Verdict != VerdictInsufficient && !enough {
				t.Fatalf("%s judged %s on %d requests (known %v, min %d)", r.Gate, r.Verdict, st.Requests, st.MetricsKnown, g.MinSamples)
			}
			if r.Verdict == VerdictPass && r.Value > r.Threshold {
				t.Fatalf("%s passed with %g > %g", r.Gate, r.Value, r.Threshold)
			}
		}
	})
}
