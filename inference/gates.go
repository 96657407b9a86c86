package inference

import (
	"fmt"
	"math"
	"time"
)

// Gate names a health check a rollout must pass.
type Gate string

// Gates. Readiness and CrashLoop are hard gates: their failure rolls back
// at once. ErrorRate and Latency judge traffic and need samples.
const (
	GateReadiness Gate = "Readiness"
	GateCrashLoop Gate = "CrashLoop"
	GateErrorRate Gate = "ErrorRate"
	GateLatency   Gate = "Latency"
)

// Verdict is a gate's answer.
type Verdict string

// Verdicts.
const (
	VerdictPass Verdict = "Pass"
	VerdictFail Verdict = "Fail"
	// VerdictPending: replicas are still starting within their deadlines.
	VerdictPending Verdict = "Pending"
	// VerdictInsufficient: fewer samples than the gate needs to judge;
	// never read as a pass or a failure.
	VerdictInsufficient Verdict = "InsufficientSamples"
)

// RevisionStatus is what the caller observed of one revision's replicas
// and traffic.
type RevisionStatus struct {
	// Ready replicas pass the backend's readiness check (BackendInfo).
	Ready int `json:"ready"`
	// CrashLooping replicas are in CrashLoopBackOff (or restarted past
	// the caller's threshold).
	CrashLooping int `json:"crashLooping,omitempty"`
	// Startup is each replica's startup milestones (optional; without it
	// only the overall readiness deadline applies).
	Startup []ReplicaStartup `json:"startup,omitempty"`
	// MetricsKnown: the traffic figures below were read. Requests, Errors
	// (5xx and engine errors) and P99LatencyMs cover the window that
	// starts at Step.MeasureFrom, synthetic probes included.
	MetricsKnown bool    `json:"metricsKnown"`
	Requests     int64   `json:"requests"`
	Errors       int64   `json:"errors"`
	P99LatencyMs float64 `json:"p99LatencyMs"`
}

// GateResult is one gate's verdict with its figures.
type GateResult struct {
	Gate    Gate    `json:"gate"`
	Verdict Verdict `json:"verdict"`
	// Value against Threshold: ready replicas vs wanted, crash-looping
	// replicas vs 0, error rate vs maximum, p99 ms vs maximum.
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// Samples and MinSamples: requests seen vs needed (traffic gates).
	Samples    int64 `json:"samples,omitempty"`
	MinSamples int64 `json:"minSamples,omitempty"`
	// Detail names what failed (a replica and phase, for example).
	Detail string `json:"detail,omitempty"`
}

// Message renders the result for people.
func (g GateResult) Message() string {
	var m string
	switch g.Gate {
	case GateReadiness:
		m = fmt.Sprintf("readiness %s: %g of %g replicas ready", g.Verdict, g.Value, g.Threshold)
	case GateCrashLoop:
		m = fmt.Sprintf("crash loops %s: %g replicas crash-looping", g.Verdict, g.Value)
	case GateErrorRate:
		m = fmt.Sprintf("error rate %s: %.4g (max %.4g)", g.Verdict, g.Value, g.Threshold)
	case GateLatency:
		m = fmt.Sprintf("p99 latency %s: %.4g ms (max %.4g ms)", g.Verdict, g.Value, g.Threshold)
	default:
		m = fmt.Sprintf("%s %s", g.Gate, g.Verdict)
	}
	if g.Verdict == VerdictInsufficient {
		m += fmt.Sprintf(", %d of %d samples", g.Samples, g.MinSamples)
	}
	if g.Detail != "" {
		m += ": " + g.Detail
	}
	return m
}

// HealthGates judges the hard gates of a revision that should have want
// ready replicas. Readiness fails when a replica missed a startup phase
// deadline (CheckStartup), or when fewer than want have been ready since
// unreadySince for longer than all of d's budgets together (the backstop
// when per-replica phases are not known); it is pending while replicas
// start in time. One crash-looping replica fails CrashLoop: a restart loop
// is evidence enough, and replicas that never start are Readiness's.
func HealthGates(now time.Time, d StartupDeadlines, want int, unreadySince time.Time, st RevisionStatus) []GateResult {
	ready := GateResult{Gate: GateReadiness, Verdict: VerdictPass, Value: float64(st.Ready), Threshold: float64(want)}
	rep := CheckStartup(now, d, st.Startup)
	switch {
	case len(rep.Overdue) > 0:
		o := rep.Overdue[0]
		ready.Verdict = VerdictFail
		ready.Detail = fmt.Sprintf("replica %s did not reach %s by %s", o.Replica, o.Phase, o.Deadline.UTC().Format(time.RFC3339))
		if len(rep.Overdue) > 1 {
			ready.Detail += fmt.Sprintf(" (and %d more)", len(rep.Overdue)-1)
		}
	case st.Ready >= want:
	case !unreadySince.IsZero() && d.Total() > 0 && !now.Before(unreadySince.Add(d.Total())):
		ready.Verdict = VerdictFail
		ready.Detail = fmt.Sprintf("not ready within %s", d.Total())
	default:
		ready.Verdict = VerdictPending
	}
	crash := GateResult{Gate: GateCrashLoop, Verdict: VerdictPass, Value: float64(st.CrashLooping)}
	if st.CrashLooping > 0 {
		crash.Verdict = VerdictFail
	}
	return []GateResult{ready, crash}
}

// TrafficGates judges the error-rate and latency gates over the traffic
// in st (disabled gates are left out). Each needs g.MinSamples requests:
// with fewer, or with unknown metrics (a NaN p99 included), its verdict
// is VerdictInsufficient. An error rate above g.MaxErrorRate or a p99 above
// g.MaxP99LatencyMs fails.
func TrafficGates(g GateSettings, st RevisionStatus) []GateResult {
	var out []GateResult
	samples := st.Requests
	if !st.MetricsKnown || samples < 0 {
		samples = 0
	}
	judge := func(r GateResult, known, bad bool) GateResult {
		r.Samples, r.MinSamples = samples, int64(g.MinSamples)
		switch {
		case !known || samples < int64(max(g.MinSamples, 1)):
			r.Verdict = VerdictInsufficient
		case bad:
			r.Verdict = VerdictFail
		default:
			r.Verdict = VerdictPass
		}
		return r
	}
	if g.MaxErrorRate < 1 {
		rate := 0.0
		if samples > 0 {
			rate = float64(max(st.Errors, 0)) / float64(samples)
		}
		out = append(out, judge(GateResult{Gate: GateErrorRate, Value: rate, Threshold: g.MaxErrorRate}, true, rate > g.MaxErrorRate))
	}
	if g.MaxP99LatencyMs > 0 {
		// A NaN p99 (no histogram data) is unknown, not slow.
		p99 := st.P99LatencyMs
		known := !math.IsNaN(p99) && !math.IsInf(p99, 0) && p99 >= 0
		if !known {
			p99 = 0 // results are encoded as JSON, which has no NaN
		}
		out = append(out, judge(GateResult{Gate: GateLatency, Value: p99, Threshold: g.MaxP99LatencyMs}, known, p99 > g.MaxP99LatencyMs))
	}
	return out
}

// firstWith returns the first result with verdict v.
func firstWith(rs []GateResult, v Verdict) (GateResult, bool) {
	for _, r := range rs {
		if r.Verdict == v {
			return r, true
		}
	}
	return GateResult{}, false
}
