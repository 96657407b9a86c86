package inference

import (
	"cmp"
	"slices"
	"time"
)

// StartupPhase is a replica's startup milestone.
type StartupPhase string

// Startup phases, in order.
const (
	PhaseScheduled   StartupPhase = "Scheduled"   // bound to a node (GPUs found)
	PhaseImagePulled StartupPhase = "ImagePulled" // serving image present
	PhaseEngineReady StartupPhase = "EngineReady" // readiness passed (weights loaded)
)

// ReplicaStartup is when one replica reached each phase (zero: not yet).
// Created starts the first phase's clock.
type ReplicaStartup struct {
	Replica     string    `json:"replica"`
	Created     time.Time `json:"created"`
	Scheduled   time.Time `json:"scheduled,omitzero"`
	ImagePulled time.Time `json:"imagePulled,omitzero"`
	EngineReady time.Time `json:"engineReady,omitzero"`
}

// StartupOverdue is a replica that did not reach Phase by Deadline (it is
// still short of it, or reached it late).
type StartupOverdue struct {
	Replica  string       `json:"replica"`
	Phase    StartupPhase `json:"phase"`
	Deadline time.Time    `json:"deadline"`
	// Late: the phase was reached, after the deadline.
	Late bool `json:"late,omitempty"`
}

// StartupReport is CheckStartup's answer.
type StartupReport struct {
	// Overdue lists, by replica name, the first phase each replica missed.
	Overdue []StartupOverdue `json:"overdue,omitempty"`
	// Ready counts replicas that reached EngineReady in time.
	Ready int `json:"ready"`
	// NextDeadline is the earliest deadline still running (zero if none):
	// where the workflow sets its durable timer.
	NextDeadline time.Time `json:"nextDeadline,omitzero"`
}

// CheckStartup checks each replica's phases against the per-phase budgets
// of d, each phase's clock starting when the previous phase was reached
// (Created for Scheduled). A phase whose timestamp is missing while a later
// one is set counts as reached at that later time. A zero budget disables
// that phase's deadline. The replicas' order does not matter.
func CheckStartup(now time.Time, d StartupDeadlines, replicas []ReplicaStartup) StartupReport {
	rs := slices.Clone(replicas)
	slices.SortFunc(rs, func(a, b ReplicaStartup) int { return cmp.Compare(a.Replica, b.Replica) })
	var rep StartupReport
	for _, r := range rs {
		phases := [3]struct {
			p      StartupPhase
			at     time.Time
			budget time.Duration
		}{{PhaseScheduled, r.Scheduled, d.Scheduled.D()}, {PhaseImagePulled, r.ImagePulled, d.ImagePulled.D()}, {PhaseEngineReady, r.EngineReady, d.EngineReady.D()}}
		// A later milestone implies the earlier ones.
		for i := len(phases) - 2; i >= 0; i-- {
			if phases[i].at.IsZero() {
				phases[i].at = phases[i+1].at
			}
		}
		start := r.Created
		overdue := false
		for _, ph := range phases {
			if start.IsZero() {
				break // the clock never started: nothing to hold the replica to
			}
			if ph.budget > 0 {
				deadline := start.Add(ph.budget)
				switch {
				case ph.at.IsZero() && !now.Before(deadline), !ph.at.IsZero() && ph.at.After(deadline):
					rep.Overdue = append(rep.Overdue, StartupOverdue{Replica: r.Replica, Phase: ph.p, Deadline: deadline, Late: !ph.at.IsZero()})
					overdue = true
				case ph.at.IsZero():
					if rep.NextDeadline.IsZero() || deadline.Before(rep.NextDeadline) {
						rep.NextDeadline = deadline
					}
				}
			}
			if overdue || ph.at.IsZero() {
				break
			}
			start = ph.at
		}
		if !overdue && !phases[2].at.IsZero() {
			rep.Ready++
		}
	}
	return rep
}
