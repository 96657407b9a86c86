package inference

import (
	"fmt"
	"time"
)

// Action is what a Step asks of the caller.
type Action string

// Actions.
const (
	// ActionProgress: apply Replicas and Traffic, then call Next again
	// by WaitUntil or when observations change.
	ActionProgress Action = "Progress"
	// ActionPaused: hold Replicas and Traffic until a Promote or an Abort
	// (gates keep being checked: a failure still rolls back).
	ActionPaused Action = "Paused"
	// ActionPromote: apply the final layout; the candidate is now the
	// stable revision.
	ActionPromote Action = "Promote"
	// ActionRollBack: apply the stable revision's layout; the rollout
	// failed (Reason, FailedGate).
	ActionRollBack Action = "RollBack"
	// ActionDone: the rollout ended earlier (Promote or RollBack); the
	// layout is the final one.
	ActionDone Action = "Done"
)

// Command is a person's (or API client's) input to a rollout.
type Command string

// Commands.
const (
	CommandNone Command = ""
	// CommandPromote skips the current pause and any wait for samples
	// (never readiness, and failing gates still roll back), resumes a
	// paused rollout and promotes a blue-green preview. Given before the
	// step it applies to, it is kept until then.
	CommandPromote Command = "Promote"
	// CommandAbort rolls back now.
	CommandAbort Command = "Abort"
)

// Stage is where a rollout is.
type Stage string

// Stages.
const (
	// StageInitial: the endpoint's first revision starts (no stable one).
	StageInitial Stage = "Initial"
	// StageRolling: replicas are replaced in batches.
	StageRolling Stage = "Rolling"
	// StageAnalysis: all replicas are new; the gates decide.
	StageAnalysis Stage = "Analysis"
	// StageCanaryScale: the canary step's replicas start; traffic stays.
	StageCanaryScale Stage = "CanaryScale"
	// StageCanaryPause: the step's weight is applied; pause and gates.
	StageCanaryPause Stage = "CanaryPause"
	// StageFill: after the last canary step, the remaining replicas are
	// replaced in batches.
	StageFill Stage = "Fill"
	// StagePreview: blue-green preview at 0% traffic.
	StagePreview Stage = "Preview"
	// StageFinished: promoted or rolled back.
	StageFinished Stage = "Finished"
)

// RevisionReplicas is a revision's requested replica count.
type RevisionReplicas struct {
	Revision int `json:"revision"`
	Replicas int `json:"replicas"`
}

// RevisionWeight is a revision's traffic weight in percent.
type RevisionWeight struct {
	Revision int `json:"revision"`
	Weight   int `json:"weight"`
}

// Step is the rollout's instruction after one observation. Apply it in
// this order so that capacity never drops below what traffic needs: scale
// up, then shift traffic, then scale down; with ScaleDownFirst, shift
// traffic, scale down, wait for the removed replicas to be gone (their
// GPUs released), then scale up.
type RolloutStep struct {
	Action Action `json:"action"`
	Stage  Stage  `json:"stage"`
	// CanaryStep is the index of the current canary step.
	CanaryStep int `json:"canaryStep,omitempty"`
	// Replicas and Traffic list each revision, by revision number;
	// weights sum to 100. Traffic is empty only after a first revision
	// was rolled back: nothing serves.
	Replicas []RevisionReplicas `json:"replicas"`
	Traffic  []RevisionWeight   `json:"traffic,omitempty"`
	// ScaleDownFirst: the rollout is surge-free, so the replicas this
	// step removes must free their GPUs before the new ones start.
	ScaleDownFirst bool `json:"scaleDownFirst,omitempty"`
	// WaitUntil is when to call Next again at the latest, even if nothing
	// changed (zero: only on a change or a command).
	WaitUntil time.Time `json:"waitUntil,omitzero"`
	// MeasureFrom is the start of the window the candidate's Requests,
	// Errors and P99 must cover in the next input (zero: not measured).
	MeasureFrom time.Time `json:"measureFrom,omitzero"`
	// Probes is how many synthetic requests to send to the candidate
	// because the gates lack samples (GateSettings.SyntheticProbes).
	Probes int `json:"probes,omitempty"`
	// Gates are this step's verdicts: the hard gates, and the traffic
	// gates while measuring.
	Gates      []GateResult `json:"gates,omitempty"`
	Reason     string       `json:"reason"`
	FailedGate Gate         `json:"failedGate,omitempty"`
}

// RolloutInput is one observation of a rollout.
type RolloutInput struct {
	Now time.Time `json:"now"`
	// Target is how many replicas the endpoint should serve with now (the
	// autoscaler's figure); below 1 counts as 1, since a revision cannot
	// be judged without a replica.
	Target    int            `json:"target"`
	Stable    RevisionStatus `json:"stable"`
	Candidate RevisionStatus `json:"candidate"`
	Command   Command        `json:"command,omitempty"`
}

// Rollout replaces an endpoint's stable revision by a candidate. Like the
// Autoscaler it is a value the entity workflow keeps; Next is
// deterministic in (the rollout, its input).
type Rollout struct {
	// Stable is the serving revision's number (0: none, a first deploy);
	// Candidate the new one's.
	Stable    int `json:"stable"`
	Candidate int `json:"candidate"`
	// Settings are the candidate's, with defaults applied.
	Settings RolloutSettings `json:"settings"`
	State    RolloutState    `json:"state"`
}

// RolloutState is the rollout's memory between observations.
type RolloutState struct {
	Stage      Stage `json:"stage"`
	CanaryStep int   `json:"canaryStep,omitempty"`
	// The layout requested last.
	StableReplicas    int       `json:"stableReplicas"`
	CandidateReplicas int       `json:"candidateReplicas"`
	CandidateWeight   int       `json:"candidateWeight"`
	Started           time.Time `json:"started,omitzero"`
	// UnreadySince: the candidate has had fewer ready replicas than
	// requested since then (reset by each scale-up).
	UnreadySince time.Time `json:"unreadySince,omitzero"`
	// MeasureFrom starts the traffic window; GateDue is when a verdict is
	// due; InsufficientSince when the gates started lacking samples
	// after it was due.
	MeasureFrom       time.Time `json:"measureFrom,omitzero"`
	GateDue           time.Time `json:"gateDue,omitzero"`
	InsufficientSince time.Time `json:"insufficientSince,omitzero"`
	// Paused holds the reason while paused.
	Paused           string `json:"paused,omitempty"`
	PromoteRequested bool   `json:"promoteRequested,omitempty"`
	// Final is the step that ended the rollout.
	Final *RolloutStep `json:"final,omitempty"`
}

// NewRollout prepares the rollout of candidate over stable (nil for an
// endpoint's first revision), with the candidate's rollout settings.
func NewRollout(stable *Revision, candidate Revision) Rollout {
	r := Rollout{Candidate: candidate.Number, Settings: WithDefaults(candidate.Spec).Rollout}
	if stable != nil {
		r.Stable = stable.Number
	}
	return r
}

// call is one Next's context.
type call struct {
	in    RolloutInput
	now   time.Time
	T     int
	gates []GateResult
}

// Next returns the rollout's next Step for the observation in and updates
// the state. Order of checks: a finished rollout answers Done; Abort rolls
// back; a failing hard gate (a crash-looping candidate replica, a missed
// startup deadline) rolls back; while the candidate's traffic is measured,
// a traffic gate that fails with enough samples rolls back; then the
// strategy's stage decides. See the package documentation.
func (r *Rollout) Next(in RolloutInput) RolloutStep {
	st := &r.State
	if st.Final != nil {
		f := cloneStep(*st.Final)
		f.Action = ActionDone
		return f
	}
	c := &call{in: in, now: in.Now, T: max(1, in.Target)}
	if st.Started.IsZero() {
		r.start(c)
	}
	switch in.Command {
	case CommandAbort:
		return r.finish(c, ActionRollBack, "aborted on request", "")
	case CommandPromote:
		st.PromoteRequested = true
	}
	if in.Candidate.Ready >= st.CandidateReplicas {
		st.UnreadySince = time.Time{}
	} else if st.UnreadySince.IsZero() {
		st.UnreadySince = c.now
	}
	c.gates = HealthGates(c.now, r.Settings.Startup, st.CandidateReplicas, st.UnreadySince, in.Candidate)
	if g, bad := firstWith(c.gates, VerdictFail); bad {
		return r.finish(c, ActionRollBack, g.Message(), g.Gate)
	}
	if !st.MeasureFrom.IsZero() {
		traffic := TrafficGates(r.Settings.Gates, in.Candidate)
		c.gates = append(c.gates, traffic...)
		if g, bad := firstWith(traffic, VerdictFail); bad {
			return r.finish(c, ActionRollBack, g.Message(), g.Gate)
		}
	}
	return r.advance(c)
}

func (r *Rollout) start(c *call) {
	st := &r.State
	st.Started = c.now
	if r.Stable > 0 {
		st.StableReplicas = c.T
	}
	switch {
	case r.Stable == 0:
		st.Stage = StageInitial
	case r.Settings.Strategy == StrategyCanary && len(r.Settings.Canary.Steps) > 0:
		st.Stage = StageCanaryScale
	case r.Settings.Strategy == StrategyCanary:
		st.Stage = StageFill
	case r.Settings.Strategy == StrategyBlueGreen:
		st.Stage = StagePreview
	default:
		st.Stage = StageRolling
	}
}

// advance runs the current stage; stages that end without starting a new
// measurement window hand over to the next one in the same call.
func (r *Rollout) advance(c *call) RolloutStep {
	st := &r.State
	in := c.in
	for {
		switch st.Stage {
		case StageInitial:
			r.scale(c, 0, c.T)
			st.CandidateWeight = 100
			if in.Candidate.Ready >= c.T {
				return r.finish(c, ActionPromote, fmt.Sprintf("first revision ready: %d replicas", c.T), "")
			}
			return r.progress(c, fmt.Sprintf("starting the first revision: %d of %d replicas ready", in.Candidate.Ready, c.T), time.Time{}, 0)

		case StageRolling, StageFill:
			surge, unavail := surgeLimits(r.Settings)
			s, n := rollingStep(c.T, surge, unavail, st.StableReplicas, st.CandidateReplicas, in.Stable.Ready, in.Candidate.Ready)
			r.scale(c, s, n)
			w := readyWeight(s, n, in.Stable.Ready, in.Candidate.Ready, st.CandidateWeight)
			if st.Stage == StageFill {
				w = max(w, st.CandidateWeight) // never below the last canary weight
			}
			r.shift(c, w, false)
			if s == 0 && n == c.T && in.Candidate.Ready >= c.T {
				if st.Stage == StageFill {
					return r.finish(c, ActionPromote, "all replicas replaced after the canary steps", "")
				}
				st.Stage, st.GateDue = StageAnalysis, c.now
				continue
			}
			return r.progress(c, fmt.Sprintf("replacing replicas in batches (surge %d, unavailable %d): %d of %d new ready, %d old left",
				surge, unavail, min(in.Candidate.Ready, n), c.T, s), time.Time{}, 0)

		case StageAnalysis:
			r.scale(c, 0, c.T)
			r.shift(c, 100, false)
			if in.Candidate.Ready < c.T {
				return r.progress(c, fmt.Sprintf("all replicas replaced; %d of %d ready", in.Candidate.Ready, c.T), time.Time{}, 0)
			}
			a := r.analyse(c, st.GateDue)
			if a.outcome == outPass {
				return r.finish(c, ActionPromote, "all replicas replaced; gates passed", "")
			}
			return r.undecided(c, a, "all replicas replaced; ")

		case StageCanaryScale:
			if st.CanaryStep >= len(r.Settings.Canary.Steps) {
				st.Stage = StageFill
				continue
			}
			step := r.Settings.Canary.Steps[st.CanaryStep]
			s, n := r.canaryLayout(c.T, step.Weight)
			r.scale(c, s, n)
			if in.Candidate.Ready >= n {
				r.shift(c, step.Weight, true)
				st.GateDue = c.now.Add(step.Pause.D())
				st.Stage = StageCanaryPause
				return r.progress(c, fmt.Sprintf("canary step %d of %d: %d%% of traffic to %d replicas", st.CanaryStep+1, len(r.Settings.Canary.Steps), step.Weight, n), st.GateDue, r.newWindowProbes())
			}
			return r.progress(c, fmt.Sprintf("canary step %d of %d: starting replicas, %d of %d ready", st.CanaryStep+1, len(r.Settings.Canary.Steps), in.Candidate.Ready, n), time.Time{}, 0)

		case StageCanaryPause:
			if st.CanaryStep >= len(r.Settings.Canary.Steps) {
				st.Stage = StageFill
				continue
			}
			step := r.Settings.Canary.Steps[st.CanaryStep]
			s, n := r.canaryLayout(c.T, step.Weight)
			r.scale(c, s, n)
			a := r.analyse(c, st.GateDue)
			if a.outcome == outPass {
				st.CanaryStep++
				st.GateDue, st.InsufficientSince = time.Time{}, time.Time{}
				if st.CanaryStep < len(r.Settings.Canary.Steps) {
					st.Stage = StageCanaryScale
				} else {
					st.Stage, st.CanaryStep = StageFill, len(r.Settings.Canary.Steps)-1
				}
				continue
			}
			return r.undecided(c, a, fmt.Sprintf("canary step %d of %d at %d%%: ", st.CanaryStep+1, len(r.Settings.Canary.Steps), step.Weight))

		case StagePreview:
			r.scale(c, c.T, c.T)
			r.shift(c, 0, false)
			if in.Candidate.Ready < c.T {
				return r.progress(c, fmt.Sprintf("preview starting: %d of %d replicas ready", in.Candidate.Ready, c.T), time.Time{}, 0)
			}
			if st.PromoteRequested {
				return r.finish(c, ActionPromote, "preview promoted on request", "")
			}
			if st.MeasureFrom.IsZero() {
				// The window starts now: this input's figures predate it.
				st.MeasureFrom = c.now
				return r.progress(c, "preview ready at 0% traffic; measuring", time.Time{}, r.newWindowProbes())
			}
			auto := r.Settings.BlueGreen.AutoPromoteAfter.D()
			a := r.analyse(c, st.MeasureFrom.Add(auto))
			switch {
			case auto > 0 && a.outcome == outPass:
				return r.finish(c, ActionPromote, fmt.Sprintf("preview ready with passing gates for %s", auto), "")
			case auto == 0 && (a.outcome == outPass || a.outcome == outWait):
				reason := "preview ready; gates passed; awaiting Promote"
				if a.outcome == outWait {
					reason = "preview ready; awaiting Promote; " + a.reason
				}
				return r.paused(c, reason, a.probes)
			}
			return r.undecided(c, a, "preview: ")
		default:
			return r.finish(c, ActionRollBack, fmt.Sprintf("unknown stage %q", st.Stage), "")
		}
	}
}

// canaryLayout is the stable and candidate replicas of a canary weight.
func (r *Rollout) canaryLayout(T, weight int) (int, int) {
	n := canaryReplicas(weight, T)
	if r.Settings.SurgeFree {
		return T - n, n
	}
	return T, n
}

// scale requests s stable and n candidate replicas; new candidate
// replicas restart the readiness clock.
func (r *Rollout) scale(c *call, s, n int) {
	st := &r.State
	if n > st.CandidateReplicas {
		st.UnreadySince = c.now
	}
	st.StableReplicas, st.CandidateReplicas = s, n
}

// shift sets the candidate's weight; newWindow (or the first traffic to
// the candidate) starts a new measurement window.
func (r *Rollout) shift(c *call, w int, newWindow bool) {
	st := &r.State
	st.CandidateWeight = w
	if newWindow || st.MeasureFrom.IsZero() && w > 0 {
		st.MeasureFrom = c.now
		st.InsufficientSince = time.Time{}
	}
}
