package inference

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

func genScalerConfig(t *rapid.T) AutoscalerConfig {
	c := AutoscalerConfig{
		MinReplicas:    rapid.IntRange(0, 3).Draw(t, "min"),
		Target:         float64(rapid.IntRange(1, 20).Draw(t, "target")),
		StableWindow:   time.Duration(rapid.IntRange(6, 90).Draw(t, "stableSec")) * time.Second,
		PanicThreshold: rapid.SampledFrom([]float64{1.1, 1.5, 2, 3}).Draw(t, "threshold"),
		ScaleDownDelay: time.Duration(rapid.IntRange(0, 120).Draw(t, "delaySec")) * time.Second,
		SampleMaxAge:   10 * time.Second,
	}
	c.PanicWindow = max(time.Second, c.StableWindow/time.Duration(rapid.IntRange(1, 10).Draw(t, "panicDiv")))
	c.MaxReplicas = rapid.IntRange(max(c.MinReplicas, 1), 12).Draw(t, "max")
	if c.MinReplicas == 0 {
		c.IdleTimeout = time.Duration(rapid.IntRange(30, 300).Draw(t, "idleSec")) * time.Second
	}
	return c
}

// scalerTick is one decision's inputs, generated independently of the
// autoscaler's answers so that two autoscalers can be fed the same ones.
type scalerTick struct {
	at  time.Time
	cur Replicas
	obs []Observation
}

// genTicks draws a run of decisions. kind per replica: a known load, a
// scrape without the metric, nothing (missing), or a stale sample.
func genTicks(t *rapid.T, n int) []scalerTick {
	at := t0
	var ticks []scalerTick
	for range n {
		at = at.Add(time.Duration(rapid.IntRange(1, 10).Draw(t, "dt")) * time.Second)
		cur := Replicas{Current: rapid.IntRange(0, 8).Draw(t, "current")}
		cur.Ready = rapid.IntRange(0, cur.Current).Draw(t, "ready")
		tk := scalerTick{at: at, cur: cur}
		for r := range cur.Ready + rapid.IntRange(0, 1).Draw(t, "extra") {
			o := Observation{At: at, Replica: fmt.Sprint("r", r)}
			switch rapid.IntRange(0, 9).Draw(t, "kind") {
			case 0:
				continue
			case 1:
			case 2:
				o.At = at.Add(-time.Minute)
				o.Signal = QueueSignal{Running: 1, Known: true}
			default:
				o.Signal = QueueSignal{Waiting: float64(rapid.IntRange(0, 60).Draw(t, "waiting")), Running: float64(rapid.IntRange(0, 40).Draw(t, "running")), Known: true}
			}
			tk.obs = append(tk.obs, o)
		}
		if rapid.IntRange(0, 3).Draw(t, "proxy") > 0 {
			tk.obs = append(tk.obs, Observation{At: at, Source: SourceProxy,
				Signal: QueueSignal{Waiting: float64(rapid.SampledFrom([]int{0, 0, 0, 1, 5}).Draw(t, "held")), Known: true}})
		}
		ticks = append(ticks, tk)
	}
	return ticks
}

func TestAutoscalerProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genScalerConfig(t)
		a := &Autoscaler{Config: cfg}
		shuffled := &Autoscaler{Config: cfg}
		carried := &Autoscaler{Config: cfg}
		for i, tk := range genTicks(t, rapid.IntRange(1, 60).Draw(t, "ticks")) {
			d := a.Decide(tk.at, tk.obs, tk.cur)
			// State carried through JSON (continue-as-new) decides the same.
			b, err := json.Marshal(carried)
			if err != nil {
				t.Fatalf("encoding: %v", err)
			}
			carried = &Autoscaler{}
			if err := json.Unmarshal(b, carried); err != nil {
				t.Fatalf("decoding: %v", err)
			}
			if dc := carried.Decide(tk.at, tk.obs, tk.cur); dc != d {
				t.Fatalf("tick %d: after a JSON round trip: %+v, not %+v", i, dc, d)
			}
			held := 0.0
			for _, o := range tk.obs {
				if o.Source == SourceProxy {
					held = o.Signal.Load()
				}
			}
			floor := min(tk.cur.Current, cfg.MaxReplicas)
			switch {
			case d.Desired > cfg.MaxReplicas:
				t.Fatalf("tick %d: desired %d above max %d", i, d.Desired, cfg.MaxReplicas)
			case d.Desired < cfg.MinReplicas:
				t.Fatalf("tick %d: desired %d below min %d", i, d.Desired, cfg.MinReplicas)
			case d.Desired == 0 && !(cfg.MinReplicas == 0 && cfg.IdleTimeout > 0 && (d.IdleFor >= cfg.IdleTimeout || tk.cur.Current == 0)):
				t.Fatalf("tick %d: scaled to zero without idle time (idle %s, timeout %s, current %d): %s", i, d.IdleFor, cfg.IdleTimeout, tk.cur.Current, d.Message())
			case d.Panic && d.Desired < floor:
				t.Fatalf("tick %d: scaled down from %d to %d in panic", i, tk.cur.Current, d.Desired)
			case d.MetricsUnknown && d.Desired < floor:
				t.Fatalf("tick %d: scaled down from %d to %d with unknown metrics: %s", i, tk.cur.Current, d.Desired, d.Message())
			case tk.cur.Current == 0 && held > 0 && d.Desired < 1:
				t.Fatalf("tick %d: %g held requests did not wake the endpoint", i, held)
			}
			// The order of the observations does not matter.
			obs := slices.Clone(tk.obs)
			for j := len(obs) - 1; j > 0; j-- {
				k := rapid.IntRange(0, j).Draw(t, "swap")
				obs[j], obs[k] = obs[k], obs[j]
			}
			if d2 := shuffled.Decide(tk.at, obs, tk.cur); d2 != d {
				t.Fatalf("tick %d: shuffled observations decide %+v, not %+v", i, d2, d)
			}
			if diff := cmp.Diff(a.State, shuffled.State); diff != "" {
				t.Fatalf("tick %d: states differ:\n%s", i, diff)
			}
		}
	})
}

// TestAutoscalerMonotoneInLoad: with the same inputs but more load on some
// replicas, the autoscaler never asks for fewer replicas.
func TestAutoscalerMonotoneInLoad(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genScalerConfig(t)
		low, high := &Autoscaler{Config: cfg}, &Autoscaler{Config: cfg}
		for i, tk := range genTicks(t, rapid.IntRange(1, 60).Draw(t, "ticks")) {
			more := slices.Clone(tk.obs)
			for j := range more {
				if more[j].Signal.Known {
					more[j].Signal.Waiting += float64(rapid.IntRange(0, 30).Draw(t, "more"))
				}
			}
			dl := low.Decide(tk.at, tk.obs, tk.cur)
			dh := high.Decide(tk.at, more, tk.cur)
			if dh.Desired < dl.Desired {
				t.Fatalf("tick %d: more load decides %d < %d\nlow:  %s\nhigh: %s", i, dh.Desired, dl.Desired, dl.Message(), dh.Message())
			}
		}
	})
}

// TestAutoscalerStableLoadConverges: a constant, fully reported load ends
// at ⌈load / target⌉ within bounds once windows and delays have passed.
func TestAutoscalerStableLoadConverges(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genScalerConfig(t)
		cfg.MinReplicas = max(cfg.MinReplicas, 1)
		cfg.MaxReplicas = max(cfg.MaxReplicas, cfg.MinReplicas)
		a := &Autoscaler{Config: cfg}
		perReplica := float64(rapid.IntRange(0, 50).Draw(t, "perReplica"))
		cur := Replicas{Current: rapid.IntRange(1, 8).Draw(t, "start")}
		var d Decision
		for s := 0; s < 600; s += 2 {
			cur.Ready = cur.Current
			loads := make([]float64, cur.Ready)
			for i := range loads {
				loads[i] = perReplica
			}
			d = a.Decide(sec(float64(s)), replicaObs(sec(float64(s)), loads...), cur)
			cur.Current = d.Desired
		}
		// The total load follows the replica count (each replica holds
		// perReplica), so the fixed point is any count whose load maps
		// back to itself; check the decision is consistent with the load
		// it saw.
		total := perReplica * float64(cur.Current)
		want := min(max(replicasFor(total, cfg.Target), cfg.MinReplicas), cfg.MaxReplicas)
		if perReplica <= cfg.Target && d.Desired != want {
			t.Fatalf("load %g per replica (target %g) settled at %d, want %d: %s", perReplica, cfg.Target, d.Desired, want, d.Message())
		}
	})
}
