package deploy

import (
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/inference"
)

// rev is revision n running template t.
func rev(n int, t string) inference.Revision {
	return inference.Revision{Number: n, Digest: "d" + string(rune('0'+n)), TemplateDigest: t}
}

func ev(kind string, rev int, msg string) activities.EndpointEvent {
	return activities.EndpointEvent{Kind: kind, Revision: rev, Message: msg}
}

func canaryRollout(candidate int, stage inference.Stage, step int) *inference.Rollout {
	return &inference.Rollout{Stable: 1, Candidate: candidate,
		Settings: inference.RolloutSettings{Canary: inference.CanarySettings{Steps: []inference.CanaryStep{{Weight: 20}, {Weight: 50}}}},
		State:    inference.RolloutState{Stage: stage, CanaryStep: step}}
}

func TestJudge(t *testing.T) {
	base := func() activities.EndpointStatus {
		return activities.EndpointStatus{Name: "chat", EndpointState: activities.EndpointState{
			Revisions: []inference.Revision{rev(1, "a"), rev(2, "b")}, Current: 2, Stable: 1,
			Events: []activities.EndpointEvent{ev("RevisionCreated", 1, ""), ev("RolloutPromote", 1, "Finished: first revision ready"),
				ev("RevisionCreated", 2, "")},
		}}
	}
	cases := []struct {
		name   string
		edit   func(*activities.EndpointStatus)
		n      int
		done   bool
		failed string
		stage  string
	}{
		{name: "canary in progress", n: 2, edit: func(s *activities.EndpointStatus) {
			s.Rollout = canaryRollout(2, inference.StageCanaryPause, 0)
			s.LastStep = &inference.RolloutStep{Stage: inference.StageCanaryPause, Action: inference.ActionProgress, Reason: "pausing until 12:00"}
		}, stage: "revision 2: canary step 1 of 2: 20% of traffic"},
		{name: "canary scaling up", n: 2, edit: func(s *activities.EndpointStatus) {
			s.Rollout = canaryRollout(2, inference.StageCanaryScale, 1)
		}, stage: "revision 2: canary step 2 of 2: starting replicas for 50% of traffic"},
		{name: "paused preview", n: 2, edit: func(s *activities.EndpointStatus) {
			s.Rollout = &inference.Rollout{Stable: 1, Candidate: 2, State: inference.RolloutState{Stage: inference.StagePreview}}
			s.LastStep = &inference.RolloutStep{Stage: inference.StagePreview, Action: inference.ActionPaused, Reason: "preview ready; gates passed; awaiting Promote"}
		}, stage: "revision 2: paused: preview ready; gates passed; awaiting Promote; promote or abort it through the endpoint's API"},
		{name: "promoted", n: 2, edit: func(s *activities.EndpointStatus) {
			s.Stable = 2
		}, done: true},
		{name: "settings only: serves at once", n: 3, edit: func(s *activities.EndpointStatus) {
			s.Revisions = append(s.Revisions, rev(3, "a"))
		}, done: true},
		{name: "settings only during a rollout follow it", n: 3, edit: func(s *activities.EndpointStatus) {
			s.Revisions = append(s.Revisions, rev(3, "b"))
			s.Rollout = canaryRollout(2, inference.StageFill, 1)
		}, stage: "revision 2: canary steps passed; replacing the remaining replicas"},
		{name: "gate failed", n: 2, edit: func(s *activities.EndpointStatus) {
			s.Events = append(s.Events, ev("RolloutRollBack", 2, "Finished: error rate Fail: 0.5 (max 0.05)"))
		}, failed: `revision 2 of endpoint "chat" was rolled back: error rate Fail: 0.5 (max 0.05)`},
		{name: "the runtime's refusal says more than the abort it causes", n: 2, edit: func(s *activities.EndpointStatus) {
			s.Events = append(s.Events, ev("RolloutRolledBack", 2, "the runtime refused the revision: bad image"),
				ev("RolloutRollBack", 2, "Finished: aborted on request"))
		}, failed: "rolled back: the runtime refused the revision: bad image"},
		{name: "promoted, then replaced", n: 2, edit: func(s *activities.EndpointStatus) {
			s.Revisions = append(s.Revisions, rev(3, "c"))
			s.Stable, s.Current = 3, 3
			s.Events = append(s.Events, ev("RolloutPromote", 2, "Finished: all replicas replaced"),
				ev("RevisionCreated", 3, ""), ev("RolloutPromote", 3, "Finished: all replicas replaced"))
		}, done: true},
		{name: "an older rollout of the same template says nothing", n: 3, edit: func(s *activities.EndpointStatus) {
			// Revision 3 brings back revision 1's template; 1 was promoted
			// long ago, 3 was rolled back.
			s.Revisions = append(s.Revisions, rev(3, "a"))
			s.Stable, s.Current = 2, 3
			s.Events = append(s.Events, ev("RolloutPromote", 2, ""), ev("RevisionCreated", 3, ""),
				ev("RolloutRollBack", 3, "Finished: crash loops Fail: 1 replicas crash-looping"))
		}, failed: "rolled back: crash loops Fail"},
		{name: "events gone: the last step says why", n: 2, edit: func(s *activities.EndpointStatus) {
			s.Events = nil
			s.LastStep = &inference.RolloutStep{Action: inference.ActionRollBack, Reason: "readiness Fail: 0 of 1 replicas ready"}
		}, failed: "rolled back: readiness Fail"},
		{name: "events gone, nothing to say", n: 2, edit: func(s *activities.EndpointStatus) {
			s.Events = nil
		}, failed: "does not serve (revision 1 does)"},
		{name: "deleting", n: 2, edit: func(s *activities.EndpointStatus) {
			s.Deleting = true
		}, failed: `endpoint "chat" is being deleted`},
		{name: "unknown revision", n: 7, edit: func(*activities.EndpointStatus) {}, failed: "revision 7 is not in the history"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := base()
			tc.edit(&st)
			v := judge(st, tc.n)
			if v.done != tc.done || (tc.failed == "") != (v.failed == "") || !strings.Contains(v.failed, tc.failed) || v.stage != tc.stage {
				t.Errorf("judge = %+v\nwant done=%v failed~%q stage=%q", v, tc.done, tc.failed, tc.stage)
			}
		})
	}
}

func TestJudgeDetailAddsTheReason(t *testing.T) {
	st := activities.EndpointStatus{Name: "chat", EndpointState: activities.EndpointState{
		Revisions: []inference.Revision{rev(1, "a")}, Current: 1,
		Rollout:  &inference.Rollout{Candidate: 1, State: inference.RolloutState{Stage: inference.StageInitial}},
		LastStep: &inference.RolloutStep{Stage: inference.StageInitial, Action: inference.ActionProgress, Reason: "starting the first revision: 0 of 2 replicas ready"},
	}}
	v := judge(st, 1)
	if want := "revision 1: starting the endpoint's first replicas (starting the first revision: 0 of 2 replicas ready)"; v.detail != want {
		t.Errorf("detail %q, want %q", v.detail, want)
	}
	// A last step of the previous stage is not this one's reason.
	st.LastStep.Stage = ""
	if v := judge(st, 1); v.detail != "revision 1: starting the endpoint's first replicas" {
		t.Errorf("detail %q", v.detail)
	}
}
