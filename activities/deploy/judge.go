package deploy

import (
	"fmt"
	"strings"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/inference"
)

// verdict is what an endpoint's status says about the revision a step
// waits for.
type verdict struct {
	// done: the revision serves (promoted, or applied in place).
	done bool
	// failed says why it never will ("" while it may).
	failed string
	// stage is where its rollout is, in words that change only with the
	// rollout's stage (the attempt's message; each change costs history
	// events); detail adds the rollout's current reason (heartbeats).
	stage, detail string
}

// Kinds of the endpoint events that end a rollout (workflows/endpoint
// names them "Rollout" + the step's action).
const (
	eventPromoted   = "Rollout" + string(inference.ActionPromote)
	eventRollBack   = "Rollout" + string(inference.ActionRollBack)
	eventRolledBack = "RolloutRolledBack" // the runtime refused the revision
	eventCreated    = "RevisionCreated"
)

// judge reads the fate of revision n from the endpoint's status. Revisions
// that run the same thing (equal template digests) share a fate: a
// settings-only revision made during a rollout follows that rollout, and
// one made on top of the stable revision serves at once.
func judge(st activities.EndpointStatus, n int) verdict {
	if st.Deleting {
		return verdict{failed: fmt.Sprintf("endpoint %q is being deleted", st.Name)}
	}
	r := revision(st, n)
	if r == nil {
		return verdict{failed: fmt.Sprintf("revision %d is not in the history of endpoint %q (was it deleted and created again?)", n, st.Name)}
	}
	if ro := st.Rollout; ro != nil && sameTemplate(st, ro.Candidate, r) {
		stage := stageOf(ro, current(st))
		return verdict{stage: stage, detail: withReason(stage, current(st))}
	}
	if sameTemplate(st, st.Stable, r) {
		return verdict{done: true}
	}
	switch e := outcome(st, r); {
	case e == nil:
	case e.Kind == eventPromoted:
		return verdict{done: true} // and replaced since
	default:
		return verdict{failed: fmt.Sprintf("revision %d of endpoint %q was rolled back: %s", n, st.Name, rollBackReason(e))}
	}
	if l := st.LastStep; l != nil && l.Action == inference.ActionRollBack {
		return verdict{failed: fmt.Sprintf("revision %d of endpoint %q was rolled back: %s", n, st.Name, l.Reason)}
	}
	return verdict{failed: fmt.Sprintf("revision %d of endpoint %q does not serve (revision %d does), and how its rollout ended is no longer in the endpoint's events", n, st.Name, st.Stable)}
}

func revision(st activities.EndpointStatus, n int) *inference.Revision {
	for i := range st.Revisions {
		if st.Revisions[i].Number == n {
			return &st.Revisions[i]
		}
	}
	return nil
}

// sameTemplate reports whether revision n exists and runs what r runs.
func sameTemplate(st activities.EndpointStatus, n int, r *inference.Revision) bool {
	o := revision(st, n)
	return o != nil && o.TemplateDigest == r.TemplateDigest
}

// outcome finds the event that ended the first rollout of r's template
// after r was created: its promotion, or its rollback (a refusal by the
// runtime comes before the rollback it causes, and says more). Events
// older than r say nothing about it.
func outcome(st activities.EndpointStatus, r *inference.Revision) *activities.EndpointEvent {
	from := 0
	for i, e := range st.Events {
		if e.Kind == eventCreated && e.Revision == r.Number {
			from = i
		}
	}
	for i := from; i < len(st.Events); i++ {
		e := &st.Events[i]
		switch e.Kind {
		case eventPromoted, eventRollBack, eventRolledBack:
			if sameTemplate(st, e.Revision, r) {
				return e
			}
		}
	}
	return nil
}

// rollBackReason is a rollback event's message without the stage the
// endpoint prefixes it with ("Finished: error rate …").
func rollBackReason(e *activities.EndpointEvent) string {
	return strings.TrimPrefix(e.Message, string(inference.StageFinished)+": ")
}

// current is the endpoint's last step when it belongs to the rollout's
// current stage (right after an update it is still the previous one's).
func current(st activities.EndpointStatus) *inference.RolloutStep {
	if l := st.LastStep; l != nil && st.Rollout != nil && l.Stage == st.Rollout.State.Stage {
		return l
	}
	return nil
}

// stageOf describes a rollout's stage, e.g. "revision 2: canary step 1 of
// 2: 20% of traffic".
func stageOf(ro *inference.Rollout, last *inference.RolloutStep) string {
	s := ro.State
	prefix := fmt.Sprintf("revision %d: ", ro.Candidate)
	if last != nil && last.Action == inference.ActionPaused {
		return prefix + "paused: " + last.Reason + "; promote or abort it through the endpoint's API"
	}
	steps := ro.Settings.Canary.Steps
	canary := func(what string) string {
		if s.CanaryStep >= len(steps) {
			return prefix + "canary steps passed"
		}
		return prefix + fmt.Sprintf("canary step %d of %d: ", s.CanaryStep+1, len(steps)) + fmt.Sprintf(what, steps[s.CanaryStep].Weight)
	}
	switch s.Stage {
	case "":
		return prefix + "waiting for the endpoint's next tick"
	case inference.StageInitial:
		return prefix + "starting the endpoint's first replicas"
	case inference.StageRolling:
		return prefix + "replacing replicas"
	case inference.StageAnalysis:
		return prefix + "all replicas replaced; health gates deciding"
	case inference.StageCanaryScale:
		return canary("starting replicas for %d%% of traffic")
	case inference.StageCanaryPause:
		return canary("%d%% of traffic")
	case inference.StageFill:
		return prefix + "canary steps passed; replacing the remaining replicas"
	case inference.StagePreview:
		return prefix + "blue-green preview at 0% of traffic"
	}
	return prefix + string(s.Stage)
}

// withReason adds the rollout's current reason to a stage.
func withReason(stage string, last *inference.RolloutStep) string {
	if last == nil || last.Reason == "" || last.Action == inference.ActionPaused {
		return stage
	}
	return stage + " (" + last.Reason + ")"
}
