package inference

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/atelier-ml/atelier/schema"
)

func genRolloutSettings(t *rapid.T) RolloutSettings {
	s := RolloutSettings{Strategy: rapid.SampledFrom([]Strategy{StrategyRolling, StrategyCanary, StrategyBlueGreen}).Draw(t, "strategy")}
	s.SurgeFree = s.Strategy != StrategyBlueGreen && rapid.Bool().Draw(t, "surgeFree")
	if !s.SurgeFree {
		surge := rapid.IntRange(0, 2).Draw(t, "surge")
		s.MaxSurge = ptr(surge)
		s.MaxUnavailable = ptr(rapid.IntRange(map[bool]int{true: 1, false: 0}[surge == 0], 2).Draw(t, "unavail"))
	}
	if s.Strategy == StrategyCanary {
		w := 0
		for range rapid.IntRange(1, 3).Draw(t, "steps") {
			if w >= 100 {
				break
			}
			w = rapid.IntRange(w+1, min(w+60, 100)).Draw(t, "weight")
			s.Canary.Steps = append(s.Canary.Steps, CanaryStep{Weight: w, Pause: schema.Duration(time.Duration(rapid.IntRange(0, 120).Draw(t, "pause")) * time.Second)})
		}
	}
	if s.Strategy == StrategyBlueGreen && rapid.Bool().Draw(t, "auto") {
		s.BlueGreen.AutoPromoteAfter = schema.Duration(time.Duration(rapid.IntRange(1, 120).Draw(t, "autoAfter")) * time.Second)
	}
	interval := time.Duration(rapid.IntRange(5, 60).Draw(t, "interval")) * time.Second
	s.Gates = GateSettings{
		MaxErrorRate:     rapid.SampledFrom([]float64{0.01, 0.1, 1}).Draw(t, "maxErrorRate"),
		MaxP99LatencyMs:  rapid.SampledFrom([]float64{0, 500}).Draw(t, "maxP99"),
		MinSamples:       rapid.IntRange(1, 100).Draw(t, "minSamples"),
		AnalysisInterval: schema.Duration(interval),
		MaxInsufficient:  schema.Duration(interval * time.Duration(rapid.IntRange(1, 10).Draw(t, "insufficientIntervals"))),
		OnInsufficient:   rapid.SampledFrom([]OnInsufficient{InsufficientPause, InsufficientFail}).Draw(t, "onInsufficient"),
		SyntheticProbes:  rapid.Bool().Draw(t, "probes"),
	}
	s.Startup = StartupDeadlines{Scheduled: schema.Duration(2 * time.Minute), ImagePulled: schema.Duration(2 * time.Minute), EngineReady: schema.Duration(3 * time.Minute)}
	return s
}

// world plays the cluster and the traffic around a rollout.
type world struct {
	requested [2]int // stable, candidate, as the last step asked
	ready     [2]int
	measure   time.Time
	requests  int64
	errors    int64
	step      RolloutStep
}

func (w *world) apply(s RolloutStep, r *Rollout) {
	w.step = s
	for _, rr := range s.Replicas {
		i := 0
		if rr.Revision == r.Candidate {
			i = 1
		}
		w.requested[i] = rr.Replicas
		w.ready[i] = min(w.ready[i], rr.Replicas)
	}
	if !s.MeasureFrom.Equal(w.measure) {
		w.measure, w.requests, w.errors = s.MeasureFrom, 0, 0
	}
}

func (w *world) candWeight(r *Rollout) int {
	for _, tw := range w.step.Traffic {
		if tw.Revision == r.Candidate {
			return tw.Weight
		}
	}
	return 0
}

type worldTraits struct {
	errRate    float64
	p99        float64
	crashEvery int // 0: never
	readyPace  int // max replicas becoming ready per call
	readyMin   int // min replicas becoming ready per call
	traffic    int // max requests per call at 100%
	commands   bool
	maxSleep   time.Duration // 0: no bound
	// promoteWhenPaused: a person promotes every paused rollout.
	promoteWhenPaused bool
}

// observe moves the world on and returns the rollout's input.
func (w *world) observe(t *rapid.T, r *Rollout, now time.Time, target int, tr worldTraits) RolloutInput {
	for i := range 2 {
		if w.ready[i] < w.requested[i] {
			gap := w.requested[i] - w.ready[i]
			w.ready[i] += rapid.IntRange(min(tr.readyMin, gap), min(max(tr.readyPace, tr.readyMin), gap)).Draw(t, "becomeReady")
		}
	}
	if !w.measure.IsZero() {
		n := int64(rapid.IntRange(0, tr.traffic).Draw(t, "requests")*w.candWeight(r)/100 + w.step.Probes)
		w.requests += n
		w.errors += int64(float64(n) * tr.errRate)
	}
	in := RolloutInput{Now: now, Target: target,
		Stable:    RevisionStatus{Ready: w.ready[0]},
		Candidate: RevisionStatus{Ready: w.ready[1], MetricsKnown: !w.measure.IsZero(), Requests: w.requests, Errors: w.errors, P99LatencyMs: tr.p99}}
	if tr.crashEvery > 0 && rapid.IntRange(0, tr.crashEvery).Draw(t, "crash") == 0 {
		in.Candidate.CrashLooping = 1
	}
	if tr.promoteWhenPaused && w.step.Action == ActionPaused {
		in.Command = CommandPromote
	}
	if tr.commands {
		switch rapid.IntRange(0, 40).Draw(t, "command") {
		case 0:
			in.Command = CommandAbort
		case 1, 2, 3:
			in.Command = CommandPromote
		}
	}
	return in
}

// checkStep asserts what every step must satisfy.
func checkStep(t *rapid.T, i int, r *Rollout, in RolloutInput, s RolloutStep, T int, peak int) {
	sum := 0
	for _, tw := range s.Traffic {
		if tw.Weight < 0 || tw.Weight > 100 {
			t.Fatalf("call %d: weight %d", i, tw.Weight)
		}
		sum += tw.Weight
		for _, rr := range s.Replicas {
			if rr.Revision == tw.Revision && rr.Replicas == 0 && tw.Weight > 0 && rr.Revision != r.Candidate {
				t.Fatalf("call %d: weight %d to revision %d without replicas: %s", i, tw.Weight, tw.Revision, layoutOf(s))
			}
		}
	}
	switch {
	case len(s.Traffic) > 0 && sum != 100:
		t.Fatalf("call %d: weights sum to %d: %s", i, sum, layoutOf(s))
	case len(s.Traffic) == 0 && r.Stable != 0:
		t.Fatalf("call %d: no traffic with a stable revision", i)
	}
	total := 0
	for _, rr := range s.Replicas {
		if rr.Replicas < 0 || rr.Revision != r.Stable && rr.Revision != r.Candidate {
			t.Fatalf("call %d: bad replicas %+v", i, rr)
		}
		total += rr.Replicas
	}
	if total > peak {
		t.Fatalf("call %d: %d replicas at once, plan peak %d (target %d, %s): %s", i, total, peak, T, s.Stage, layoutOf(s))
	}
	failed, short := false, false
	for _, g := range s.Gates {
		failed = failed || g.Verdict == VerdictFail
		short = short || g.Verdict == VerdictInsufficient
		if (g.Gate == GateErrorRate || g.Gate == GateLatency) && g.Verdict != VerdictInsufficient && g.Samples < int64(r.Settings.Gates.MinSamples) {
			t.Fatalf("call %d: %s judged on %d samples (min %d)", i, g.Gate, g.Samples, r.Settings.Gates.MinSamples)
		}
	}
	switch s.Action {
	case ActionRollBack:
		insufficientFail := r.Settings.Gates.OnInsufficient == InsufficientFail && short && strings.Contains(s.Reason, "short of samples")
		if in.Command != CommandAbort && !failed && !insufficientFail {
			t.Fatalf("call %d: rolled back without a failed gate or an abort: %s", i, s.Reason)
		}
	case ActionPromote:
		if failed || in.Candidate.Ready < T {
			t.Fatalf("call %d: promoted with %d of %d ready, gates %+v", i, in.Candidate.Ready, T, s.Gates)
		}
	}
}

// planPeak is the most replicas the plan may request at once.
func planPeak(r *Rollout, T int) int {
	if r.Stable == 0 {
		return T
	}
	peak := 0
	for _, l := range planLayouts(true, r.Settings, T) {
		peak = max(peak, l[0]+l[1])
	}
	return peak
}

func runWorld(t *rapid.T, r *Rollout, T int, tr worldTraits, calls int, onStep func(i int, in RolloutInput, s RolloutStep)) {
	w := &world{requested: [2]int{T, 0}, ready: [2]int{T, 0}}
	if r.Stable == 0 {
		w.requested[0], w.ready[0] = 0, 0
	}
	peak := planPeak(r, T)
	copyR := roundTrip(t, r)
	now := t0
	var final *RolloutStep
	lastCanaryWeight := 0
	for i := range calls {
		in := w.observe(t, r, now, T, tr)
		s := r.Next(in)
		// A copy carried through JSON (continue-as-new) decides the same.
		s2 := copyR.Next(in)
		if diff := cmp.Diff(s, s2); diff != "" {
			t.Fatalf("call %d: JSON round trip changed the step:\n%s", i, diff)
		}
		copyR = roundTrip(t, copyR)
		checkStep(t, i, r, in, s, T, peak)
		if final != nil {
			if s.Action != ActionDone || layoutOf(s) != layoutOf(*final) {
				t.Fatalf("call %d: after %s: %s [%s]", i, final.Action, s.Action, layoutOf(s))
			}
		} else if s.Action == ActionPromote || s.Action == ActionRollBack {
			final = &s
		}
		if r.Settings.Strategy == StrategyCanary && r.Stable != 0 && s.Action != ActionRollBack && s.Action != ActionDone {
			cw := 0
			for _, tw := range s.Traffic {
				if tw.Revision == r.Candidate {
					cw = tw.Weight
				}
			}
			if cw < lastCanaryWeight {
				t.Fatalf("call %d: canary weight went back from %d to %d", i, lastCanaryWeight, cw)
			}
			lastCanaryWeight = cw
		}
		if onStep != nil {
			onStep(i, in, s)
		}
		w.apply(s, r)
		dt := time.Duration(rapid.IntRange(1, 30).Draw(t, "dt")) * time.Second
		if !s.WaitUntil.IsZero() && rapid.Bool().Draw(t, "sleepUntil") {
			dt = max(time.Second, s.WaitUntil.Sub(now))
		}
		if tr.maxSleep > 0 {
			dt = min(dt, tr.maxSleep)
		}
		now = now.Add(dt)
	}
}

func roundTrip(t *rapid.T, r *Rollout) *Rollout {
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("encoding the rollout: %v", err)
	}
	var out Rollout
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("decoding the rollout: %v", err)
	}
	return &out
}

func genRollout(t *rapid.T) *Rollout {
	s := genRolloutSettings(t)
	r := &Rollout{Stable: 1, Candidate: 2, Settings: WithDefaults(EndpointSpec{Backend: BackendVLLM, Rollout: s}).Rollout}
	if rapid.IntRange(0, 5).Draw(t, "first") == 0 {
		r.Stable = 0
	}
	return r
}

// TestRolloutProperties: in a random world (slow, crashing or failing
// replicas, random commands), every step is well formed, stays within the
// plan's peak, judges no gate below its sample minimum, rolls back only
// for a reason and promotes only a ready, healthy candidate; a rollout
// carried through JSON decides the same.
func TestRolloutProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRollout(t)
		tr := worldTraits{
			errRate:    rapid.SampledFrom([]float64{0, 0.005, 0.3}).Draw(t, "errRate"),
			p99:        rapid.SampledFrom([]float64{100, 1000}).Draw(t, "p99"),
			crashEvery: rapid.SampledFrom([]int{0, 0, 30}).Draw(t, "crashEvery"),
			readyPace:  rapid.IntRange(0, 3).Draw(t, "readyPace"),
			traffic:    rapid.SampledFrom([]int{0, 10, 200}).Draw(t, "traffic"),
			commands:   rapid.Bool().Draw(t, "commands"),
		}
		runWorld(t, r, rapid.IntRange(1, 6).Draw(t, "target"), tr, rapid.IntRange(1, 80).Draw(t, "calls"), nil)
	})
}

// TestRolloutHealthyCandidatePromotes: with replicas that start, enough
// healthy traffic and a person who promotes whatever pauses, every
// rollout ends promoted.
func TestRolloutHealthyCandidatePromotes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRollout(t)
		r.Settings.Gates.SyntheticProbes = true
		// Replicas start one per observation at least, observations come
		// at least every minute: within every readiness deadline.
		tr := worldTraits{p99: 100, readyMin: 1, readyPace: 3, traffic: 200, maxSleep: time.Minute, promoteWhenPaused: true}
		T := rapid.IntRange(1, 6).Draw(t, "target")
		promoted := false
		runWorld(t, r, T, tr, 300, func(i int, in RolloutInput, s RolloutStep) {
			switch s.Action {
			case ActionRollBack:
				t.Fatalf("call %d: healthy candidate rolled back: %s", i, s.Reason)
			case ActionPromote:
				promoted = true
			}
		})
		if !promoted {
			t.Fatalf("not promoted after 300 observations: %+v", r.State)
		}
	})
}
