package inference

import (
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/schema"
)

func testScaler(mut ...func(*AutoscalerConfig)) *Autoscaler {
	a := &Autoscaler{Config: AutoscalerConfig{MinReplicas: 1, MaxReplicas: 10, Target: 10,
		StableWindow: 60 * time.Second, PanicWindow: 6 * time.Second, PanicThreshold: 2, SampleMaxAge: 10 * time.Second}}
	for _, m := range mut {
		m(&a.Config)
	}
	return a
}

// replicaObs are per-replica samples at at; a negative load is a replica
// whose scrape lacked the queue metrics.
func replicaObs(at time.Time, loads ...float64) []Observation {
	var out []Observation
	for i, l := range loads {
		o := Observation{At: at, Replica: string(rune('a' + i)), Signal: QueueSignal{Running: l, Known: l >= 0}}
		if l < 0 {
			o.Signal = QueueSignal{}
		}
		out = append(out, o)
	}
	return out
}

func proxyObs(at time.Time, held float64) Observation {
	return Observation{At: at, Source: SourceProxy, Signal: QueueSignal{Waiting: held, Known: true}}
}

// feed runs decisions every step from `from` to `to` seconds (inclusive)
// with the same per-replica loads, and returns the last decision.
func feed(a *Autoscaler, from, to, step float64, cur Replicas, loads ...float64) Decision {
	var d Decision
	for s := from; s <= to; s += step {
		d = a.Decide(sec(s), replicaObs(sec(s), loads...), cur)
	}
	return d
}

func TestAutoscalerDecisions(t *testing.T) {
	three := Replicas{Current: 3, Ready: 3}
	tests := []struct {
		name       string
		run        func(a *Autoscaler) Decision
		cfg        func(*AutoscalerConfig)
		want       int
		reason     ScaleReason
		panic      bool
		unknown    bool
		msgContain string
	}{{
		name:   "steady load at target",
		run:    func(a *Autoscaler) Decision { return feed(a, 0, 60, 2, three, 10, 10, 10) },
		want:   3,
		reason: ReasonStable,
	}, {
		name:   "rising load scales up from the stable average",
		run:    func(a *Autoscaler) Decision { return feed(a, 0, 60, 2, three, 16, 17, 17) },
		want:   5,
		reason: ReasonStable,
	}, {
		name: "a burst in the panic window panics and scales on the short window",
		run: func(a *Autoscaler) Decision {
			feed(a, 0, 58, 2, Replicas{Current: 2, Ready: 2}, 10, 10)
			return feed(a, 60, 62, 2, Replicas{Current: 2, Ready: 2}, 50, 50)
		},
		// Panic window (56, 62]: 20, 100, 100 → 73.3 → 8 replicas ≥ 2 × 2 ready.
		want: 8, reason: ReasonPanic, panic: true,
		msgContain: "panic mode: no scale-down",
	}, {
		name: "panic does not scale down until a stable window passes without a burst",
		run: func(a *Autoscaler) Decision {
			feed(a, 0, 58, 2, Replicas{Current: 2, Ready: 2}, 10, 10)
			feed(a, 60, 62, 2, Replicas{Current: 2, Ready: 2}, 50, 50)
			return feed(a, 64, 120, 2, Replicas{Current: 8, Ready: 8}, 1, 1, 1, 1, 1, 1, 1, 1)
		},
		want: 8, reason: ReasonPanic, panic: true,
	}, {
		name: "after panic, the stable window decides again",
		run: func(a *Autoscaler) Decision {
			feed(a, 0, 58, 2, Replicas{Current: 2, Ready: 2}, 10, 10)
			feed(a, 60, 62, 2, Replicas{Current: 2, Ready: 2}, 50, 50)
			return feed(a, 64, 200, 2, Replicas{Current: 8, Ready: 8}, 1, 1, 1, 1, 1, 1, 1, 1)
		},
		want: 1, reason: ReasonStable,
	}, {
		name: "scale-down waits for the delay",
		cfg:  func(c *AutoscalerConfig) { c.ScaleDownDelay = 2 * time.Minute },
		run: func(a *Autoscaler) Decision {
			feed(a, 0, 60, 2, Replicas{Current: 5, Ready: 5}, 10, 10, 10, 10, 10)
			return feed(a, 62, 160, 2, Replicas{Current: 5, Ready: 5}, 1, 1, 1, 1, 1)
		},
		want: 5, reason: ReasonScaleDownDelay,
	}, {
		name: "scale-down after the delay",
		cfg:  func(c *AutoscalerConfig) { c.ScaleDownDelay = 2 * time.Minute },
		run: func(a *Autoscaler) Decision {
			feed(a, 0, 60, 2, Replicas{Current: 5, Ready: 5}, 10, 10, 10, 10, 10)
			return feed(a, 62, 300, 2, Replicas{Current: 5, Ready: 5}, 1, 1, 1, 1, 1)
		},
		want: 1, reason: ReasonStable,
	}, {
		name: "missing replica metrics freeze scale-down",
		run: func(a *Autoscaler) Decision {
			// Two of three replicas stop reporting (one scrape lacks the
			// metric, one sends nothing): never read as zero.
			return a.Decide(sec(0), replicaObs(sec(0), 0, -1), three)
		},
		want: 3, reason: ReasonMetricsUnknown, unknown: true,
		msgContain: "metrics missing for 2 ready replica(s): scale-down frozen",
	}, {
		name: "missing metrics do not stop a scale-up",
		run: func(a *Autoscaler) Decision {
			// One of three reports 40: the two silent ones are estimated
			// alike, 120 in total.
			return a.Decide(sec(0), replicaObs(sec(0), 40), three)
		},
		want: 10, reason: ReasonMaxReplicas, unknown: true, panic: true,
	}, {
		name: "stale samples count as missing",
		run: func(a *Autoscaler) Decision {
			return a.Decide(sec(30), replicaObs(sec(0), 0, 0, 0), three)
		},
		want: 3, reason: ReasonMetricsUnknown, unknown: true,
	}, {
		name: "an aggregate replaces per-replica samples",
		run: func(a *Autoscaler) Decision {
			obs := append(replicaObs(sec(0), -1), Observation{At: sec(0), Source: SourceAggregate, Signal: QueueSignal{Waiting: 5, Running: 15, Known: true}})
			return a.Decide(sec(0), obs, three)
		},
		want: 2, reason: ReasonStable,
	}, {
		name: "max replicas",
		run:  func(a *Autoscaler) Decision { return feed(a, 0, 60, 2, three, 100, 100, 100) },
		want: 10, reason: ReasonMaxReplicas, panic: true,
	}, {
		name: "min replicas",
		cfg:  func(c *AutoscalerConfig) { c.MinReplicas = 2 },
		run:  func(a *Autoscaler) Decision { return feed(a, 0, 60, 2, three, 0, 0, 0) },
		want: 2, reason: ReasonMinReplicas,
	}, {
		name: "idle but not yet for the idle timeout keeps one replica",
		cfg:  func(c *AutoscalerConfig) { c.MinReplicas, c.IdleTimeout = 0, 5*time.Minute },
		run:  func(a *Autoscaler) Decision { return feed(a, 0, 200, 2, Replicas{Current: 1, Ready: 1}, 0) },
		want: 1, reason: ReasonAwaitingIdle, msgContain: "idle for 3m20s",
	}, {
		name: "scale to zero after the idle timeout",
		cfg:  func(c *AutoscalerConfig) { c.MinReplicas, c.IdleTimeout = 0, 5*time.Minute },
		run:  func(a *Autoscaler) Decision { return feed(a, 0, 300, 2, Replicas{Current: 1, Ready: 1}, 0) },
		want: 0, reason: ReasonScaleToZero,
	}, {
		name: "missing metrics reset the idle clock",
		cfg:  func(c *AutoscalerConfig) { c.MinReplicas, c.IdleTimeout = 0, 5*time.Minute },
		run: func(a *Autoscaler) Decision {
			feed(a, 0, 100, 2, Replicas{Current: 1, Ready: 1}, 0)
			feed(a, 102, 110, 2, Replicas{Current: 1, Ready: 1}, -1)
			return feed(a, 112, 320, 2, Replicas{Current: 1, Ready: 1}, 0)
		},
		want: 1, reason: ReasonAwaitingIdle,
	}, {
		name: "held requests wake an endpoint at zero",
		cfg:  func(c *AutoscalerConfig) { c.MinReplicas, c.IdleTimeout = 0, 5*time.Minute },
		run: func(a *Autoscaler) Decision {
			for s := 0.0; s < 600; s += 2 {
				a.Decide(sec(s), []Observation{proxyObs(sec(s), 0)}, Replicas{})
			}
			return a.Decide(sec(600), []Observation{proxyObs(sec(600), 1)}, Replicas{})
		},
		want: 1, reason: ReasonActivation, msgContain: "1 request(s) held at the proxy",
	}, {
		name: "a burst of held requests starts several replicas",
		cfg:  func(c *AutoscalerConfig) { c.MinReplicas, c.IdleTimeout = 0, 5*time.Minute },
		run: func(a *Autoscaler) Decision {
			a.Decide(sec(0), []Observation{proxyObs(sec(0), 0)}, Replicas{})
			return a.Decide(sec(2), []Observation{proxyObs(sec(2), 80)}, Replicas{})
		},
		want: 4, reason: ReasonActivation, panic: true,
	}, {
		name: "at zero without the proxy's signal nothing wakes",
		cfg:  func(c *AutoscalerConfig) { c.MinReplicas, c.IdleTimeout = 0, 5*time.Minute },
		run:  func(a *Autoscaler) Decision { return a.Decide(sec(0), nil, Replicas{}) },
		want: 0, reason: ReasonMetricsUnknown, unknown: true,
	}, {
		name: "no data at all holds the current count",
		run:  func(a *Autoscaler) Decision { return a.Decide(sec(0), nil, Replicas{Current: 4, Ready: 4}) },
		want: 4, reason: ReasonMetricsUnknown, unknown: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := testScaler()
			if tt.cfg != nil {
				tt.cfg(&a.Config)
			}
			d := tt.run(a)
			if d.Desired != tt.want || d.Reason != tt.reason || d.Panic != tt.panic || d.MetricsUnknown != tt.unknown {
				t.Errorf("decision = %d %s panic=%v unknown=%v; want %d %s panic=%v unknown=%v\n%s",
					d.Desired, d.Reason, d.Panic, d.MetricsUnknown, tt.want, tt.reason, tt.panic, tt.unknown, d.Message())
			}
			if tt.msgContain != "" && !strings.Contains(d.Message(), tt.msgContain) {
				t.Errorf("message %q lacks %q", d.Message(), tt.msgContain)
			}
		})
	}
}

func TestAutoscalerConfigFor(t *testing.T) {
	s := vllmSpec()
	s.Replicas = ReplicaRange{Min: ptr(0), Max: 6}
	s.Autoscaling.IdleTimeout = schema.Duration(15 * time.Minute)
	c := AutoscalerConfigFor(s)
	want := AutoscalerConfig{MinReplicas: 0, MaxReplicas: 6, Target: 32, StableWindow: time.Minute, PanicWindow: 6 * time.Second,
		PanicThreshold: 2, ScaleDownDelay: 5 * time.Minute, IdleTimeout: 15 * time.Minute, SampleMaxAge: DefaultSampleMaxAge}
	if c != want {
		t.Errorf("config = %+v\nwant %+v", c, want)
	}
}

func TestAutoscalerStateIsBounded(t *testing.T) {
	a := testScaler(func(c *AutoscalerConfig) { c.StableWindow = time.Hour; c.ScaleDownDelay = time.Hour })
	for i := range maxHistory + 500 {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		a.Decide(at, replicaObs(at, 1), Replicas{Current: 1, Ready: 1})
	}
	if len(a.State.Loads) > maxHistory || len(a.State.Desired) > maxHistory {
		t.Errorf("history = %d loads, %d desired; bound %d", len(a.State.Loads), len(a.State.Desired), maxHistory)
	}
	b := testScaler()
	feed(b, 0, 1000, 2, Replicas{Current: 1, Ready: 1}, 1)
	if len(b.State.Loads) != 30 {
		t.Errorf("loads kept = %d, want the 30 of the stable window", len(b.State.Loads))
	}
}
