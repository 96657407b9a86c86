package inference

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Source says where an observation comes from.
type Source string

// Observation sources.
const (
	// SourceReplica: one replica's scrape (Observation.Replica names it).
	SourceReplica Source = ""
	// SourceAggregate: the load of all replicas at once (e.g. a
	// Prometheus sum); it replaces the per-replica samples when known.
	SourceAggregate Source = "aggregate"
	// SourceProxy: requests held at the activating proxy while replicas
	// are missing or starting (Signal.Waiting). It is required at zero
	// replicas, where it is the only signal, and optional above.
	SourceProxy Source = "proxy"
)

// Observation is one timestamped queue signal.
type Observation struct {
	At      time.Time   `json:"at"`
	Source  Source      `json:"source,omitempty"`
	Replica string      `json:"replica,omitempty"`
	Signal  QueueSignal `json:"signal"`
}

// tick is one decision's measurement.
type tick struct {
	load     float64
	held     float64
	usable   bool // some estimate of the load exists
	complete bool // every source the decision needs reported
	missing  int
}

// measure turns one decision's observations into a total load.
func (a *Autoscaler) measure(now time.Time, obs []Observation, cur Replicas) tick {
	maxAge := a.Config.SampleMaxAge
	if maxAge <= 0 {
		maxAge = DefaultSampleMaxAge
	}
	fresh := func(o Observation) bool { return now.Sub(o.At) < maxAge }
	// A non-finite or negative figure is a broken scrape: unknown.
	sane := func(o Observation) Observation {
		l := o.Signal.Load()
		if math.IsNaN(l) || math.IsInf(l, 0) || o.Signal.Waiting < 0 || o.Signal.Running < 0 {
			o.Signal = QueueSignal{}
		}
		return o
	}
	// Rank samples so that the newest of each source wins whatever the
	// input order. Ties go to the higher load, then to an unknown sample:
	// duplicates can neither lower the figure nor hide a missing metric.
	var reps []Observation
	var agg, proxy *Observation
	newer := func(x, y Observation) bool {
		if !x.At.Equal(y.At) {
			return x.At.After(y.At)
		}
		if lx, ly := x.Signal.Load(), y.Signal.Load(); lx != ly {
			return lx > ly
		}
		return !x.Signal.Known && y.Signal.Known
	}
	for i := range obs {
		o := sane(obs[i])
		if !fresh(o) {
			continue
		}
		switch o.Source {
		case SourceAggregate:
			if agg == nil || newer(o, *agg) {
				agg = &o
			}
		case SourceProxy:
			if proxy == nil || newer(o, *proxy) {
				proxy = &o
			}
		case SourceReplica:
			reps = append(reps, o)
		}
	}
	var t tick
	proxyKnown := proxy != nil && proxy.Signal.Known
	if proxyKnown {
		t.held = proxy.Signal.Load()
	}

	var replicaLoad float64
	replicaKnown, replicaUsable := false, false
	if agg != nil && agg.Signal.Known {
		replicaLoad, replicaKnown, replicaUsable = agg.Signal.Load(), true, true
	} else {
		slices.SortFunc(reps, func(x, y Observation) int {
			if c := cmp.Compare(x.Replica, y.Replica); c != 0 {
				return c
			}
			if newer(x, y) {
				return -1
			}
			if newer(y, x) {
				return 1
			}
			return 0
		})
		known := 0
		for i, o := range reps {
			if i > 0 && reps[i-1].Replica == o.Replica {
				continue // an older sample of the same replica
			}
			if o.Signal.Known {
				replicaLoad += o.Signal.Load()
				known++
			}
		}
		t.missing = max(0, cur.Ready-known)
		switch {
		case t.missing == 0:
			replicaKnown, replicaUsable = true, true
		case known > 0:
			// Estimate the silent replicas from the reporting ones, as
			// Knative does; the decision is still incomplete.
			replicaLoad += replicaLoad / float64(known) * float64(t.missing)
			replicaUsable = true
		}
	}
	t.load = replicaLoad + t.held
	// At zero replicas the proxy is the only witness of demand.
	proxyNeeded := cur.Current == 0 && cur.Ready == 0
	t.complete = replicaKnown && (proxyKnown || !proxyNeeded)
	t.usable = replicaUsable && (proxyKnown || !proxyNeeded)
	return t
}
