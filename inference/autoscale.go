package inference

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// AutoscalerConfig is what the autoscaler obeys: the replica bounds and the
// autoscaling settings with defaults applied (AutoscalerConfigFor).
type AutoscalerConfig struct {
	MinReplicas, MaxReplicas  int
	Target                    float64 // requests per replica
	StableWindow, PanicWindow time.Duration
	PanicThreshold            float64
	ScaleDownDelay            time.Duration
	// IdleTimeout > 0 with MinReplicas 0 allows scale to zero.
	IdleTimeout time.Duration
	// SampleMaxAge: an observation older than this at decision time is
	// ignored, so a replica whose scrapes stopped counts as missing.
	SampleMaxAge time.Duration
}

// DefaultSampleMaxAge is AutoscalerConfig.SampleMaxAge from
// AutoscalerConfigFor: a few scrape intervals.
const DefaultSampleMaxAge = 10 * time.Second

// maxHistory bounds the state kept for the windows, so that a caller
// deciding far more often than expected cannot grow workflow state
// without limit (the oldest points go first).
const maxHistory = 4096

// AutoscalerConfigFor derives the autoscaler's configuration from a spec.
func AutoscalerConfigFor(spec EndpointSpec) AutoscalerConfig {
	s := WithDefaults(spec)
	a := s.Autoscaling
	return AutoscalerConfig{
		MinReplicas: s.Replicas.MinReplicas(), MaxReplicas: s.Replicas.Max,
		Target:       a.TargetQueuePerReplica,
		StableWindow: a.StableWindow.D(), PanicWindow: a.PanicWindow.D(), PanicThreshold: a.PanicThreshold,
		ScaleDownDelay: a.ScaleDownDelay.D(), IdleTimeout: a.IdleTimeout.D(),
		SampleMaxAge: DefaultSampleMaxAge,
	}
}

// Autoscaler decides an endpoint's replica count. It is a value the
// entity workflow keeps (and carries across continue-as-new): Config may
// be replaced when a revision changes the settings; State is the window
// history. Decide is deterministic in (Config, State, arguments).
type Autoscaler struct {
	Config AutoscalerConfig `json:"config"`
	State  AutoscalerState  `json:"state"`
}

// AutoscalerState is the autoscaler's memory between decisions.
type AutoscalerState struct {
	// Loads are the total loads of past decisions that had data, oldest
	// first, kept for StableWindow.
	Loads []Point `json:"loads,omitempty"`
	// Desired are past decisions' figures before the scale-down delay,
	// kept for ScaleDownDelay.
	Desired []Point `json:"desired,omitempty"`
	// LastPanic is when the panic condition last held (zero: not in
	// panic); PanicMax the highest figure decided during this panic.
	LastPanic time.Time `json:"lastPanic,omitzero"`
	PanicMax  int       `json:"panicMax,omitempty"`
	// LastActive is the last decision whose demand was not known to be
	// zero (load above zero, or metrics missing).
	LastActive time.Time `json:"lastActive,omitzero"`
}

// Point is one figure at one time.
type Point struct {
	At    time.Time `json:"at"`
	Value float64   `json:"value"`
}

// Replicas is the endpoint's replica count now: Current is what is
// requested (the last decision applied), Ready how many serve.
type Replicas struct {
	Current int `json:"current"`
	Ready   int `json:"ready"`
}

// ScaleReason names the rule that settled a decision.
type ScaleReason string

// Scale reasons.
const (
	ReasonStable ScaleReason = "Stable"
	// ReasonPanic: a burst in the panic window; no scale-down until the
	// stable window has passed without one.
	ReasonPanic ScaleReason = "Panic"
	// ReasonScaleDownDelay: a lower figure waits for the delay.
	ReasonScaleDownDelay ScaleReason = "ScaleDownDelay"
	// ReasonMetricsUnknown: metrics are missing, so the count does not go
	// down (missing is never zero).
	ReasonMetricsUnknown ScaleReason = "MetricsUnknown"
	ReasonMinReplicas    ScaleReason = "MinReplicas"
	ReasonMaxReplicas    ScaleReason = "MaxReplicas"
	// ReasonAwaitingIdle: no demand, but not yet for IdleTimeout; one
	// replica stays.
	ReasonAwaitingIdle ScaleReason = "AwaitingIdle"
	ReasonScaleToZero  ScaleReason = "ScaleToZero"
	// ReasonActivation: requests arrived while at zero.
	ReasonActivation ScaleReason = "Activation"
)

// Decision is the autoscaler's answer and the figures behind it.
type Decision struct {
	Desired int         `json:"desired"`
	Reason  ScaleReason `json:"reason"`
	Panic   bool        `json:"panic"`
	// MetricsUnknown: this decision lacked metrics (Missing replicas, or
	// no data at all), so it could not scale down.
	MetricsUnknown bool `json:"metricsUnknown"`
	// Missing is the number of ready replicas without a fresh, known
	// sample (their load was estimated from the others').
	Missing int `json:"missing,omitempty"`
	// Load is this decision's total (held requests included; 0 without
	// data); Held the part held at the proxy.
	Load float64 `json:"load"`
	Held float64 `json:"held,omitempty"`
	// The window averages and the replicas they ask for.
	StableLoad    float64 `json:"stableLoad"`
	PanicLoad     float64 `json:"panicLoad"`
	StableDesired int     `json:"stableDesired"`
	PanicDesired  int     `json:"panicDesired"`
	// IdleFor is how long demand has been known to be zero.
	IdleFor time.Duration `json:"idleFor,omitempty"`
}

// Message renders the decision for people (status, logs, events).
func (d Decision) Message() string {
	m := fmt.Sprintf("%s: %d replicas (load %.4g; stable window %.4g → %d, panic window %.4g → %d)",
		d.Reason, d.Desired, d.Load, d.StableLoad, d.StableDesired, d.PanicLoad, d.PanicDesired)
	if d.Panic {
		m += "; panic mode: no scale-down"
	}
	if d.MetricsUnknown {
		m += fmt.Sprintf("; metrics missing for %d ready replica(s): scale-down frozen", d.Missing)
	}
	if d.Held > 0 {
		m += fmt.Sprintf("; %.4g request(s) held at the proxy", d.Held)
	}
	if d.IdleFor > 0 {
		m += fmt.Sprintf("; idle for %s", d.IdleFor)
	}
	return m
}

// Decide returns the number of replicas the endpoint should have at now,
// given the observations made since the last decision (older ones may be
// passed again: only the newest fresh sample per source counts) and the
// current replica counts, and updates the state. It reads no clock: now
// is the caller's (workflow.Now). See the package documentation for the
// rules.
func (a *Autoscaler) Decide(now time.Time, obs []Observation, cur Replicas) Decision {
	c := a.Config
	st := &a.State
	t := a.measure(now, obs, cur)
	d := Decision{Held: t.held, Missing: t.missing, MetricsUnknown: !t.complete}
	if t.usable {
		d.Load = t.load
		st.Loads = appendPoint(st.Loads, now, t.load)
	}
	st.Loads = prune(st.Loads, now, c.StableWindow)
	if !t.complete || t.load > 0 || st.LastActive.IsZero() {
		st.LastActive = now
	}
	d.IdleFor = now.Sub(st.LastActive)

	target := c.Target
	if !(target > 0) {
		target = 1
	}
	stable, okS := mean(st.Loads, now, c.StableWindow)
	panicLoad, okP := mean(st.Loads, now, c.PanicWindow)
	d.StableLoad, d.PanicLoad = stable, panicLoad
	d.StableDesired, d.PanicDesired = replicasFor(stable, target), replicasFor(panicLoad, target)

	desired := cur.Current
	noData := !okS
	if !noData {
		desired = d.StableDesired
		if okP && panicLoad/target >= c.PanicThreshold*float64(max(1, cur.Ready)) {
			st.LastPanic = now
		}
		if !st.LastPanic.IsZero() && now.Sub(st.LastPanic) < c.StableWindow {
			d.Panic = true
			desired = max(desired, d.PanicDesired, st.PanicMax, cur.Current)
			st.PanicMax = desired
		} else {
			st.LastPanic, st.PanicMax = time.Time{}, 0
		}
	}
	frozen := false
	if !t.complete && desired < cur.Current {
		desired, frozen = cur.Current, true
	}
	st.Desired = prune(appendPoint(st.Desired, now, float64(desired)), now, c.ScaleDownDelay)
	delayed := desired
	if c.ScaleDownDelay > 0 {
		for _, p := range st.Desired {
			if inWindow(p.At, now, c.ScaleDownDelay) {
				delayed = max(delayed, int(p.Value))
			}
		}
	}

	// Held requests wake an endpoint at zero whatever else is known:
	// they wait for a replica.
	activation := cur.Current == 0 && t.held > 0
	floor := max(c.MinReplicas, 1)
	if c.MinReplicas <= 0 && c.IdleTimeout > 0 && !activation {
		// At zero, stay there until demand is seen; above, go there
		// after IdleTimeout without demand.
		if cur.Current == 0 && !(t.usable && t.load > 0) || d.IdleFor >= c.IdleTimeout {
			floor = 0
		}
	}
	final := min(max(delayed, floor), max(c.MaxReplicas, 1))
	d.Desired = final

	switch {
	case cur.Current == 0 && final > 0:
		d.Reason = ReasonActivation
	case noData:
		d.Reason = ReasonMetricsUnknown
	case final == 0:
		d.Reason = ReasonScaleToZero
	case final < delayed:
		d.Reason = ReasonMaxReplicas
	case final > delayed && floor == 1 && c.MinReplicas <= 0:
		d.Reason = ReasonAwaitingIdle
	case final > delayed:
		d.Reason = ReasonMinReplicas
	case frozen:
		d.Reason = ReasonMetricsUnknown
	case d.Panic:
		d.Reason = ReasonPanic
	case delayed > desired:
		d.Reason = ReasonScaleDownDelay
	default:
		d.Reason = ReasonStable
	}
	return d
}

// replicasFor is ⌈load / target⌉, ignoring float noise below 1e-9 so that
// 3 × target is 3 replicas, not 4.
func replicasFor(load, target float64) int {
	if !(load > 0) {
		return 0
	}
	r := math.Ceil(load/target - 1e-9)
	if r > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(r)
}

func inWindow(at, now time.Time, w time.Duration) bool {
	return !at.After(now) && now.Sub(at) < w
}

func mean(ps []Point, now time.Time, w time.Duration) (float64, bool) {
	sum, n := 0.0, 0
	for _, p := range ps {
		if inWindow(p.At, now, w) {
			sum += p.Value
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}

func appendPoint(ps []Point, at time.Time, v float64) []Point {
	ps = append(ps, Point{At: at, Value: v})
	if len(ps) > maxHistory {
		ps = slices.Delete(ps, 0, len(ps)-maxHistory)
	}
	return ps
}

// prune drops points that have left the window (those after now stay:
// they are ignored by the windows, not lost).
func prune(ps []Point, now time.Time, w time.Duration) []Point {
	return slices.DeleteFunc(ps, func(p Point) bool { return !p.At.After(now) && now.Sub(p.At) >= w })
}
