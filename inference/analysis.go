package inference

import (
	"fmt"
	"time"
)

// outcome is what an analysis of the traffic gates concluded.
type outcome int

const (
	outPass outcome = iota
	outWait
	outPause
	outFail
)

// analysis is an outcome with what the step needs to say about it.
type analysis struct {
	outcome outcome
	reason  string
	wake    time.Time
	probes  int
	gate    Gate
}

// analyse decides a measured stage whose verdict is due at due: wait for
// due (unless a Promote skips it), then pass when every traffic gate
// passes; when some lack samples, wait (asking for probes) up to
// MaxInsufficient, then pause or fail. Failures with enough samples were
// handled by Next.
func (r *Rollout) analyse(c *call, due time.Time) analysis {
	st := &r.State
	g := r.Settings.Gates
	if st.Paused != "" {
		if st.PromoteRequested {
			st.PromoteRequested, st.Paused = false, ""
			return analysis{outcome: outPass}
		}
		return analysis{outcome: outPause, reason: st.Paused, probes: r.probesWanted(c)}
	}
	if st.PromoteRequested {
		st.PromoteRequested = false
		return analysis{outcome: outPass}
	}
	probes := r.probesWanted(c)
	if c.now.Before(due) {
		// Probes asked for during the pause make the verdict ready when
		// it is due.
		return analysis{outcome: outWait, reason: fmt.Sprintf("pausing until %s", due.UTC().Format(time.RFC3339)), wake: due, probes: probes}
	}
	short, ok := firstWith(TrafficGates(g, c.in.Candidate), VerdictInsufficient)
	if !ok {
		return analysis{outcome: outPass}
	}
	// The clock starts when the lack is first seen, so the caller always
	// gets one round of probes before it runs out.
	if st.InsufficientSince.IsZero() {
		st.InsufficientSince = c.now
	}
	limit := st.InsufficientSince.Add(g.MaxInsufficient.D())
	if !c.now.Before(limit) {
		reason := fmt.Sprintf("gates short of samples for %s (%s)", g.MaxInsufficient.D(), short.Message())
		if g.OnInsufficient == InsufficientFail {
			return analysis{outcome: outFail, reason: reason, gate: short.Gate}
		}
		st.Paused = reason
		return analysis{outcome: outPause, reason: reason, probes: probes}
	}
	return analysis{outcome: outWait, reason: "waiting for samples: " + short.Message(), wake: limit, probes: probes}
}

// probesWanted is the number of synthetic requests that would bring every
// traffic gate to its minimum, when probes are enabled.
func (r *Rollout) probesWanted(c *call) int {
	g := r.Settings.Gates
	if !g.SyntheticProbes {
		return 0
	}
	need := int64(0)
	for _, res := range TrafficGates(g, c.in.Candidate) {
		if res.Verdict == VerdictInsufficient {
			need = max(need, res.MinSamples-res.Samples)
		}
	}
	return int(min(need, int64(MaxMinSamples)))
}

// newWindowProbes is the probes a fresh measurement window asks for.
func (r *Rollout) newWindowProbes() int {
	if !r.Settings.Gates.SyntheticProbes || len(TrafficGates(r.Settings.Gates, RevisionStatus{})) == 0 {
		return 0
	}
	return r.Settings.Gates.MinSamples
}
