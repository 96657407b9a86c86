package inference

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/schema"
)

// newRollout rolls revision 2 (vllmSpec with the settings mut makes) over
// revision 1, or starts revision 2 alone when first.
func newRollout(first bool, mut func(*RolloutSettings)) *Rollout {
	spec := vllmSpec()
	if mut != nil {
		mut(&spec.Rollout)
	}
	var stable *Revision
	if !first {
		stable = &Revision{Number: 1, Spec: WithDefaults(vllmSpec())}
	}
	r := NewRollout(stable, Revision{Number: 2, Spec: WithDefaults(spec)})
	return &r
}

// layoutOf renders a step's layout as "rev:replicas/weight ...".
func layoutOf(s RolloutStep) string {
	var parts []string
	for _, rr := range s.Replicas {
		w := -1
		for _, tw := range s.Traffic {
			if tw.Revision == rr.Revision {
				w = tw.Weight
			}
		}
		parts = append(parts, fmt.Sprintf("%d:%d/%d", rr.Revision, rr.Replicas, w))
	}
	return strings.Join(parts, " ")
}

// healthy is candidate traffic of n requests, 1% of them failed, p99 200ms.
func healthy(ready int, n int64) RevisionStatus {
	return RevisionStatus{Ready: ready, MetricsKnown: true, Requests: n, Errors: n / 200, P99LatencyMs: 200}
}

func in(now time.Time, target, stableReady int, cand RevisionStatus) RolloutInput {
	return RolloutInput{Now: now, Target: target, Stable: RevisionStatus{Ready: stableReady}, Candidate: cand}
}

type expect struct {
	input  RolloutInput
	action Action
	layout string
	stage  Stage
	// contains is a substring of the reason.
	contains string
	probes   int
	gate     Gate
	wait     time.Time
}

func runCalls(t *testing.T, r *Rollout, calls []expect) {
	t.Helper()
	for i, c := range calls {
		s := r.Next(c.input)
		got := fmt.Sprintf("%s %s [%s]", s.Action, s.Stage, layoutOf(s))
		want := fmt.Sprintf("%s %s [%s]", c.action, c.stage, c.layout)
		if got != want {
			t.Fatalf("call %d: got %s, want %s (reason %q)", i, got, want, s.Reason)
		}
		if !strings.Contains(s.Reason, c.contains) {
			t.Errorf("call %d: reason %q lacks %q", i, s.Reason, c.contains)
		}
		if s.Probes != c.probes {
			t.Errorf("call %d: probes = %d, want %d", i, s.Probes, c.probes)
		}
		if s.FailedGate != c.gate {
			t.Errorf("call %d: failed gate = %q, want %q", i, s.FailedGate, c.gate)
		}
		if !c.wait.IsZero() && !s.WaitUntil.Equal(c.wait) {
			t.Errorf("call %d: wait until %s, want %s", i, s.WaitUntil.Sub(t0), c.wait.Sub(t0))
		}
		sum := 0
		for _, w := range s.Traffic {
			sum += w.Weight
		}
		if len(s.Traffic) > 0 && sum != 100 {
			t.Errorf("call %d: weights sum to %d", i, sum)
		}
	}
}

func TestRolloutFirstRevision(t *testing.T) {
	r := newRollout(true, nil)
	runCalls(t, r, []expect{
		{input: in(sec(0), 2, 0, RevisionStatus{}), action: ActionProgress, stage: StageInitial, layout: "2:2/100", contains: "0 of 2 replicas ready",
			wait: sec(0).Add(DefaultScheduledDeadline + DefaultImagePulledDeadline + DefaultEngineReadyDeadline)},
		{input: in(sec(60), 2, 0, RevisionStatus{Ready: 2}), action: ActionPromote, stage: StageFinished, layout: "2:2/100"},
		{input: in(sec(90), 5, 0, RevisionStatus{Ready: 2, CrashLooping: 2}), action: ActionDone, stage: StageFinished, layout: "2:2/100"},
	})
}

func TestRolloutRolling(t *testing.T) {
	r := newRollout(false, nil) // defaults: rolling, maxSurge 1, maxUnavailable 0
	runCalls(t, r, []expect{
		{input: in(sec(0), 3, 3, RevisionStatus{}), action: ActionProgress, stage: StageRolling, layout: "1:3/100 2:1/0"},
		{input: in(sec(10), 3, 3, healthy(1, 0)), action: ActionProgress, stage: StageRolling, layout: "1:2/67 2:1/33",
			contains: "1 of 3 new ready, 2 old left"},
		{input: in(sec(20), 3, 2, healthy(1, 20)), action: ActionProgress, stage: StageRolling, layout: "1:2/67 2:2/33"},
		{input: in(sec(30), 3, 2, healthy(2, 40)), action: ActionProgress, stage: StageRolling, layout: "1:1/33 2:2/67"},
		{input: in(sec(40), 3, 1, healthy(2, 60)), action: ActionProgress, stage: StageRolling, layout: "1:1/33 2:3/67"},
		// The last batch completes and the gates, with enough samples,
		// promote in the same call.
		{input: in(sec(50), 3, 1, healthy(3, 80)), action: ActionPromote, stage: StageFinished, layout: "1:0/0 2:3/100",
			contains: "gates passed"},
	})
	if !r.State.MeasureFrom.Equal(sec(10)) {
		t.Errorf("traffic measured from %s, want the first shift (10s)", r.State.MeasureFrom.Sub(t0))
	}
}

func TestRolloutSurgeFreeRolling(t *testing.T) {
	r := newRollout(false, func(s *RolloutSettings) { s.SurgeFree = true })
	s := r.Next(in(sec(0), 2, 2, RevisionStatus{}))
	if !s.ScaleDownFirst || layoutOf(s) != "1:1/100 2:0/0" {
		t.Fatalf("first step = %s scaleDownFirst=%v", layoutOf(s), s.ScaleDownFirst)
	}
	runCalls(t, r, []expect{
		{input: in(sec(10), 2, 1, RevisionStatus{}), action: ActionProgress, stage: StageRolling, layout: "1:1/100 2:1/0"},
		{input: in(sec(20), 2, 1, healthy(1, 0)), action: ActionProgress, stage: StageRolling, layout: "1:0/0 2:1/100"},
		{input: in(sec(30), 2, 0, healthy(1, 10)), action: ActionProgress, stage: StageRolling, layout: "1:0/0 2:2/100"},
		{input: in(sec(40), 2, 0, healthy(2, 100)), action: ActionPromote, stage: StageFinished, layout: "1:0/0 2:2/100"},
	})
}

func canary(s *RolloutSettings) {
	s.Strategy = StrategyCanary
	s.Canary.Steps = []CanaryStep{{Weight: 10, Pause: schema.Duration(time.Minute)}, {Weight: 50, Pause: schema.Duration(time.Minute)}}
}

func TestRolloutCanary(t *testing.T) {
	r := newRollout(false, canary)
	runCalls(t, r, []expect{
		{input: in(sec(0), 4, 4, RevisionStatus{}), action: ActionProgress, stage: StageCanaryScale, layout: "1:4/100 2:1/0",
			contains: "canary step 1 of 2: starting replicas, 0 of 1 ready"},
		{input: in(sec(30), 4, 4, RevisionStatus{Ready: 1}), action: ActionProgress, stage: StageCanaryPause, layout: "1:4/90 2:1/10",
			contains: "10% of traffic to 1 replicas", wait: sec(60)},
		// Gates are checked each analysis interval; the pause holds.
		{input: in(sec(60), 4, 4, healthy(1, 100)), action: ActionProgress, stage: StageCanaryPause, layout: "1:4/90 2:1/10",
			contains: "pausing until", wait: sec(90)},
		{input: in(sec(90), 4, 4, healthy(1, 200)), action: ActionProgress, stage: StageCanaryScale, layout: "1:4/90 2:2/10",
			contains: "canary step 2 of 2: starting replicas"},
		{input: in(sec(100), 4, 4, healthy(2, 10)), action: ActionProgress, stage: StageCanaryPause, layout: "1:4/50 2:2/50"},
		{input: in(sec(160), 4, 4, healthy(2, 300)), action: ActionProgress, stage: StageFill, layout: "1:2/50 2:2/50"},
		{input: in(sec(170), 4, 2, healthy(2, 320)), action: ActionProgress, stage: StageFill, layout: "1:2/50 2:3/50"},
		{input: in(sec(180), 4, 2, healthy(3, 340)), action: ActionProgress, stage: StageFill, layout: "1:1/25 2:3/75"},
		{input: in(sec(190), 4, 1, healthy(3, 360)), action: ActionProgress, stage: StageFill, layout: "1:1/25 2:4/75"},
		{input: in(sec(200), 4, 1, healthy(4, 380)), action: ActionPromote, stage: StageFinished, layout: "1:0/0 2:4/100"},
	})
}

func TestRolloutGateFailures(t *testing.T) {
	tests := []struct {
		name  string
		mut   func(*RolloutSettings)
		calls []expect
	}{{
		name: "error rate with enough samples rolls back during the pause",
		mut:  canary,
		calls: []expect{
			{input: in(sec(0), 4, 4, RevisionStatus{}), action: ActionProgress, stage: StageCanaryScale, layout: "1:4/100 2:1/0"},
			{input: in(sec(1), 4, 4, RevisionStatus{Ready: 1}), action: ActionProgress, stage: StageCanaryPause, layout: "1:4/90 2:1/10"},
			{input: in(sec(20), 4, 4, RevisionStatus{Ready: 1, MetricsKnown: true, Requests: 100, Errors: 5}), action: ActionRollBack,
				stage: StageFinished, layout: "1:4/100 2:0/0", gate: GateErrorRate, contains: "error rate Fail: 0.05 (max 0.01)"},
			{input: in(sec(30), 4, 4, RevisionStatus{}), action: ActionDone, stage: StageFinished, layout: "1:4/100 2:0/0", gate: GateErrorRate,
				contains: "error rate Fail"},
		},
	}, {
		name: "errors among too few samples are not a failure",
		mut:  canary,
		calls: []expect{
			{input: in(sec(0), 4, 4, RevisionStatus{}), action: ActionProgress, stage: StageCanaryScale, layout: "1:4/100 2:1/0"},
			{input: in(sec(1), 4, 4, RevisionStatus{Ready: 1}), action: ActionProgress, stage: StageCanaryPause, layout: "1:4/90 2:1/10"},
			{input: in(sec(20), 4, 4, RevisionStatus{Ready: 1, MetricsKnown: true, Requests: 10, Errors: 5}), action: ActionProgress,
				stage: StageCanaryPause, layout: "1:4/90 2:1/10"},
		},
	}, {
		name: "latency",
		mut:  func(s *RolloutSettings) { canary(s); s.Gates.MaxP99LatencyMs = 150 },
		calls: []expect{
			{input: in(sec(0), 4, 4, RevisionStatus{}), action: ActionProgress, stage: StageCanaryScale, layout: "1:4/100 2:1/0"},
			{input: in(sec(1), 4, 4, RevisionStatus{Ready: 1}), action: ActionProgress, stage: StageCanaryPause, layout: "1:4/90 2:1/10"},
			// NaN p99 (no histogram data) is unknown, not slow.
			{input: in(sec(20), 4, 4, RevisionStatus{Ready: 1, MetricsKnown: true, Requests: 100, P99LatencyMs: math.NaN()}), action: ActionProgress,
				stage: StageCanaryPause, layout: "1:4/90 2:1/10"},
			{input: in(sec(40), 4, 4, healthy(1, 100)), action: ActionRollBack, stage: StageFinished, layout: "1:4/100 2:0/0", gate: GateLatency,
				contains: "p99 latency Fail: 200 ms (max 150 ms)"},
		},
	}, {
		name: "a crash-looping replica rolls back at once",
		calls: []expect{
			{input: in(sec(0), 3, 3, RevisionStatus{}), action: ActionProgress, stage: StageRolling, layout: "1:3/100 2:1/0"},
			{input: in(sec(5), 3, 3, RevisionStatus{CrashLooping: 1}), action: ActionRollBack, stage: StageFinished, layout: "1:3/100 2:0/0",
				gate: GateCrashLoop, contains: "crash loops Fail: 1 replicas crash-looping"},
		},
	}, {
		name: "a replica stuck in a startup phase rolls back at that phase's deadline",
		calls: []expect{
			{input: in(sec(0), 3, 3, RevisionStatus{}), action: ActionProgress, stage: StageRolling, layout: "1:3/100 2:1/0"},
			{input: in(sec(60), 3, 3, RevisionStatus{Startup: []ReplicaStartup{{Replica: "p1", Created: sec(1), Scheduled: sec(2)}}}),
				action: ActionProgress, stage: StageRolling, layout: "1:3/100 2:1/0", wait: sec(2).Add(DefaultImagePulledDeadline)},
			{input: in(sec(2).Add(DefaultImagePulledDeadline), 3, 3, RevisionStatus{Startup: []ReplicaStartup{{Replica: "p1", Created: sec(1), Scheduled: sec(2)}}}),
				action: ActionRollBack, stage: StageFinished, layout: "1:3/100 2:0/0", gate: GateReadiness,
				contains: "replica p1 did not reach ImagePulled by 2026-11-23T12:20:02Z"},
		},
	}, {
		name: "without startup phases, the total budget bounds readiness",
		calls: []expect{
			{input: in(sec(0), 3, 3, RevisionStatus{}), action: ActionProgress, stage: StageRolling, layout: "1:3/100 2:1/0"},
			{input: in(sec(3600), 3, 3, RevisionStatus{}), action: ActionRollBack, stage: StageFinished, layout: "1:3/100 2:0/0", gate: GateReadiness,
				contains: "not ready within 1h0m0s"},
		},
	}, {
		name: "abort",
		mut:  canary,
		calls: []expect{
			{input: in(sec(0), 4, 4, RevisionStatus{}), action: ActionProgress, stage: StageCanaryScale, layout: "1:4/100 2:1/0"},
			{input: RolloutInput{Now: sec(5), Target: 4, Command: CommandAbort}, action: ActionRollBack, stage: StageFinished, layout: "1:4/100 2:0/0",
				contains: "aborted on request"},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runCalls(t, newRollout(false, tt.mut), tt.calls)
		})
	}
}

func TestRolloutInsufficientSamples(t *testing.T) {
	probes := func(s *RolloutSettings) {
		canary(s)
		s.Gates.SyntheticProbes = true
		s.Gates.MaxInsufficient = schema.Duration(5 * time.Minute)
	}
	start := []expect{
		{input: in(sec(0), 4, 4, RevisionStatus{}), action: ActionProgress, stage: StageCanaryScale, layout: "1:4/100 2:1/0"},
		// A fresh window asks for a full set of probes.
		{input: in(sec(0), 4, 4, RevisionStatus{Ready: 1}), action: ActionProgress, stage: StageCanaryPause, layout: "1:4/90 2:1/10", probes: 50},
		// The pause ended at 60s with 20 of 50 samples: ask for 30 probes,
		// and come back by the insufficiency limit (60s + 5m) at the latest.
		{input: in(sec(60), 4, 4, healthy(1, 20)), action: ActionProgress, stage: StageCanaryPause, layout: "1:4/90 2:1/10",
			probes: 30, contains: "waiting for samples: error rate InsufficientSamples: 0 (max 0.01), 20 of 50 samples", wait: sec(90)},
	}
	t.Run("pause after the limit, Promote resumes", func(t *testing.T) {
		r := newRollout(false, probes)
		runCalls(t, r, append(start,
			expect{input: in(sec(360), 4, 4, healthy(1, 40)), action: ActionPaused, stage: StageCanaryPause, layout: "1:4/90 2:1/10",
				probes: 10, contains: "gates short of samples for 5m0s"},
			expect{input: in(sec(400), 4, 4, healthy(1, 45)), action: ActionPaused, stage: StageCanaryPause, layout: "1:4/90 2:1/10", probes: 5},
			expect{input: RolloutInput{Now: sec(410), Target: 4, Stable: RevisionStatus{Ready: 4}, Candidate: healthy(1, 45), Command: CommandPromote},
				action: ActionProgress, stage: StageCanaryScale, layout: "1:4/90 2:2/10"},
		))
	})
	t.Run("or fail", func(t *testing.T) {
		r := newRollout(false, func(s *RolloutSettings) { probes(s); s.Gates.OnInsufficient = InsufficientFail })
		runCalls(t, r, append(start,
			expect{input: in(sec(360), 4, 4, healthy(1, 40)), action: ActionRollBack, stage: StageFinished, layout: "1:4/100 2:0/0",
				gate: GateErrorRate, contains: "gates short of samples for 5m0s"},
		))
	})
	t.Run("enough samples before the limit go on", func(t *testing.T) {
		r := newRollout(false, probes)
		runCalls(t, r, append(start,
			expect{input: in(sec(120), 4, 4, healthy(1, 50)), action: ActionProgress, stage: StageCanaryScale, layout: "1:4/90 2:2/10"},
		))
	})
}

func TestRolloutBlueGreen(t *testing.T) {
	bg := func(s *RolloutSettings) { s.Strategy = StrategyBlueGreen; s.Gates.SyntheticProbes = true }
	preview := []expect{
		{input: in(sec(0), 2, 2, RevisionStatus{}), action: ActionProgress, stage: StagePreview, layout: "1:2/100 2:2/0",
			contains: "preview starting: 0 of 2 replicas ready"},
		{input: in(sec(30), 2, 2, RevisionStatus{Ready: 2}), action: ActionProgress, stage: StagePreview, layout: "1:2/100 2:2/0",
			contains: "preview ready at 0% traffic; measuring", probes: 50},
	}
	t.Run("manual promote", func(t *testing.T) {
		r := newRollout(false, bg)
		runCalls(t, r, append(preview,
			expect{input: in(sec(60), 2, 2, healthy(2, 30)), action: ActionPaused, stage: StagePreview, layout: "1:2/100 2:2/0",
				contains: "preview ready; awaiting Promote; waiting for samples", probes: 20},
			expect{input: in(sec(90), 2, 2, healthy(2, 50)), action: ActionPaused, stage: StagePreview, layout: "1:2/100 2:2/0",
				contains: "preview ready; gates passed; awaiting Promote"},
			expect{input: RolloutInput{Now: sec(95), Target: 2, Stable: RevisionStatus{Ready: 2}, Candidate: healthy(2, 50), Command: CommandPromote},
				action: ActionPromote, stage: StageFinished, layout: "1:0/0 2:2/100"},
		))
	})
	t.Run("auto promote", func(t *testing.T) {
		r := newRollout(false, func(s *RolloutSettings) { bg(s); s.BlueGreen.AutoPromoteAfter = schema.Duration(2 * time.Minute) })
		runCalls(t, r, append(preview,
			expect{input: in(sec(60), 2, 2, healthy(2, 60)), action: ActionProgress, stage: StagePreview, layout: "1:2/100 2:2/0",
				contains: "pausing until", wait: sec(90)},
			expect{input: in(sec(150), 2, 2, healthy(2, 60)), action: ActionPromote, stage: StageFinished, layout: "1:0/0 2:2/100"},
		))
	})
	t.Run("failing probes roll back", func(t *testing.T) {
		r := newRollout(false, bg)
		runCalls(t, r, append(preview,
			expect{input: in(sec(60), 2, 2, RevisionStatus{Ready: 2, MetricsKnown: true, Requests: 50, Errors: 50}), action: ActionRollBack,
				stage: StageFinished, layout: "1:2/100 2:0/0", gate: GateErrorRate},
		))
	})
}
