package inference

import (
	"cmp"
	"slices"
	"time"
)

// undecided turns a non-passing analysis into a step.
func (r *Rollout) undecided(c *call, a analysis, prefix string) RolloutStep {
	switch a.outcome {
	case outFail:
		return r.finish(c, ActionRollBack, prefix+a.reason, a.gate)
	case outPause:
		return r.paused(c, prefix+a.reason, a.probes)
	}
	return r.progress(c, prefix+a.reason, a.wake, a.probes)
}

func (r *Rollout) paused(c *call, reason string, probes int) RolloutStep {
	s := r.progress(c, reason, time.Time{}, probes)
	s.Action = ActionPaused
	return s
}

// progress builds a Progress step. WaitUntil is the earliest of wake, the
// next analysis while measuring, and the candidate's next startup
// deadline while it is not ready.
func (r *Rollout) progress(c *call, reason string, wake time.Time, probes int) RolloutStep {
	st := &r.State
	s := r.layout()
	s.Action, s.Reason, s.Probes, s.Gates = ActionProgress, reason, probes, c.gates
	s.MeasureFrom = st.MeasureFrom
	soonest := func(t time.Time) {
		if t.After(c.now) && (s.WaitUntil.IsZero() || t.Before(s.WaitUntil)) {
			s.WaitUntil = t
		}
	}
	soonest(wake)
	if !st.MeasureFrom.IsZero() {
		soonest(c.now.Add(r.Settings.Gates.AnalysisInterval.D()))
	}
	if !st.UnreadySince.IsZero() {
		soonest(st.UnreadySince.Add(r.Settings.Startup.Total()))
		soonest(CheckStartup(c.now, r.Settings.Startup, c.in.Candidate.Startup).NextDeadline)
	}
	return s
}

// finish ends the rollout: Promote moves everything to the candidate,
// RollBack everything to the stable revision (all traffic at once: a
// failing candidate is worse than a short lack of capacity).
func (r *Rollout) finish(c *call, a Action, reason string, gate Gate) RolloutStep {
	st := &r.State
	if a == ActionPromote {
		st.StableReplicas, st.CandidateReplicas, st.CandidateWeight = 0, c.T, 100
	} else {
		st.StableReplicas, st.CandidateReplicas, st.CandidateWeight = 0, 0, 0
		if r.Stable > 0 {
			st.StableReplicas = c.T
		}
	}
	st.Stage, st.Paused, st.PromoteRequested = StageFinished, "", false
	s := r.layout()
	s.Action, s.Reason, s.FailedGate, s.Gates = a, reason, gate, c.gates
	f := cloneStep(s)
	st.Final = &f
	return s
}

// layout renders the requested replicas and weights. A revision without
// replicas gets no traffic; the only revision with replicas gets it all.
func (r *Rollout) layout() RolloutStep {
	st := &r.State
	s := RolloutStep{Stage: st.Stage, CanaryStep: st.CanaryStep, ScaleDownFirst: r.Settings.SurgeFree}
	if r.Stable == 0 {
		s.Replicas = []RevisionReplicas{{r.Candidate, st.CandidateReplicas}}
		if st.CandidateReplicas > 0 {
			s.Traffic = []RevisionWeight{{r.Candidate, 100}}
		}
		return s
	}
	// With no replicas at all (a surge-free rollout of one replica
	// between its scale-down and its scale-up), traffic waits for the
	// candidate.
	w := min(max(st.CandidateWeight, 0), 100)
	switch {
	case st.StableReplicas == 0:
		w = 100
	case st.CandidateReplicas == 0:
		w = 0
	}
	s.Replicas = []RevisionReplicas{{r.Stable, st.StableReplicas}, {r.Candidate, st.CandidateReplicas}}
	s.Traffic = []RevisionWeight{{r.Stable, 100 - w}, {r.Candidate, w}}
	slices.SortFunc(s.Replicas, func(a, b RevisionReplicas) int { return cmp.Compare(a.Revision, b.Revision) })
	slices.SortFunc(s.Traffic, func(a, b RevisionWeight) int { return cmp.Compare(a.Revision, b.Revision) })
	return s
}

func cloneStep(s RolloutStep) RolloutStep {
	s.Replicas = slices.Clone(s.Replicas)
	s.Traffic = slices.Clone(s.Traffic)
	s.Gates = slices.Clone(s.Gates)
	return s
}
