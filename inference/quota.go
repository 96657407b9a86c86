package inference

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/atelier-ml/atelier/gpu"
)

// GPUAmount is a number of GPUs (or MIG slices) of one type.
type GPUAmount struct {
	Type gpu.Resource `json:"type"`
	GPUs int          `json:"gpus"`
}

// QuotaCheck says whether a rollout fits the project's GPU headroom.
type QuotaCheck struct {
	Fits bool `json:"fits"`
	// PeakReplicas is the most replicas (both revisions) the plan runs
	// at once.
	PeakReplicas int `json:"peakReplicas"`
	// Extra is, per GPU type, the most GPUs the plan holds at once beyond
	// what the stable revision holds before it starts; Shortfall the part
	// of Extra above the headroom. Both are sorted by type.
	Extra     []GPUAmount `json:"extra,omitempty"`
	Shortfall []GPUAmount `json:"shortfall,omitempty"`
	// Suggestion, when the plan does not fit, is the first of these that
	// does: the same strategy with a smaller maxSurge, the same strategy
	// surge-free, a surge-free rolling rollout. Nil when none fits.
	Suggestion *RolloutSettings `json:"suggestion,omitempty"`
}

// Message renders the check for people.
func (q QuotaCheck) Message() string {
	if q.Fits {
		return fmt.Sprintf("fits: at most %d replicas at once", q.PeakReplicas)
	}
	var parts []string
	for _, s := range q.Shortfall {
		parts = append(parts, fmt.Sprintf("%d more %s", s.GPUs, s.Type))
	}
	m := fmt.Sprintf("exceeds the GPU headroom: the rollout runs up to %d replicas at once and needs %s than the project has left", q.PeakReplicas, strings.Join(parts, " and "))
	switch {
	case q.Suggestion == nil:
		m += "; no surge-free plan fits either"
	case q.Suggestion.SurgeFree:
		m += fmt.Sprintf("; a surge-free %s rollout fits (maxUnavailable %d)", q.Suggestion.Strategy, *q.Suggestion.MaxUnavailable)
	default:
		m += fmt.Sprintf("; a %s rollout with maxSurge %d fits", q.Suggestion.Strategy, *q.Suggestion.MaxSurge)
	}
	return m
}

// CheckQuota checks, before a rollout starts, whether its plan fits the
// project's GPU headroom (quota left per type, beyond what is in use:
// gpu.Quota's nominal plus borrowable minus usage, for instance), with the
// endpoint at target replicas (below 1 counts as 1). It walks the plan's
// layouts, assuming each batch is ready before the next, and counts what
// both revisions hold at each. Headroom may list a type more than once
// (amounts add up); its order does not matter. The autoscaler raising the
// target during the rollout is not accounted for.
func CheckQuota(stable *Revision, candidate Revision, target int, headroom []GPUAmount) QuotaCheck {
	settings := WithDefaults(candidate.Spec).Rollout
	q := checkPlan(stable, candidate, settings, target, headroom)
	if q.Fits {
		return q
	}
	for _, alt := range alternatives(settings) {
		if checkPlan(stable, candidate, alt, target, headroom).Fits {
			q.Suggestion = &alt
			break
		}
	}
	return q
}

// alternatives are the plans to suggest, in order of preference.
func alternatives(s RolloutSettings) []RolloutSettings {
	var out []RolloutSettings
	surge, unavail := surgeLimits(s)
	if s.Strategy == StrategyRolling && !s.SurgeFree {
		for n := surge - 1; n >= 1; n-- {
			alt := s
			alt.MaxSurge, alt.MaxUnavailable = ptrTo(n), ptrTo(unavail)
			out = append(out, alt)
		}
	}
	if !s.SurgeFree {
		alt := s
		if alt.Strategy == StrategyBlueGreen {
			alt.Strategy = StrategyRolling
		}
		alt.SurgeFree, alt.MaxSurge, alt.MaxUnavailable = true, ptrTo(0), ptrTo(max(unavail, 1))
		out = append(out, alt)
	}
	return out
}

func ptrTo(n int) *int { return &n }

func checkPlan(stable *Revision, candidate Revision, settings RolloutSettings, target int, headroom []GPUAmount) QuotaCheck {
	T := max(1, target)
	cand := candidate.Spec.Resources
	var old Resources
	if stable != nil {
		old = stable.Spec.Resources
	}
	var types []gpu.Resource
	for _, r := range []Resources{old, cand} {
		if r.GPUType != "" && r.GPUs > 0 && !slices.Contains(types, r.GPUType) {
			types = append(types, r.GPUType)
		}
	}
	slices.Sort(types)
	usage := func(t gpu.Resource, s, c int) int {
		u := 0
		if old.GPUType == t {
			u += s * old.GPUs
		}
		if cand.GPUType == t {
			u += c * cand.GPUs
		}
		return u
	}
	s0 := 0
	if stable != nil {
		s0 = T
	}
	extra := make([]int, len(types))
	var q QuotaCheck
	for _, l := range planLayouts(stable != nil, settings, T) {
		q.PeakReplicas = max(q.PeakReplicas, l[0]+l[1])
		for i, t := range types {
			extra[i] = max(extra[i], usage(t, l[0], l[1])-usage(t, s0, 0))
		}
	}
	free := map[gpu.Resource]int{} // lookups only
	for _, h := range headroom {
		free[h.Type] += h.GPUs
	}
	q.Fits = true
	for i, t := range types {
		if extra[i] <= 0 {
			continue
		}
		q.Extra = append(q.Extra, GPUAmount{t, extra[i]})
		if short := extra[i] - free[t]; short > 0 {
			q.Shortfall = append(q.Shortfall, GPUAmount{t, short})
			q.Fits = false
		}
	}
	slices.SortFunc(q.Extra, func(a, b GPUAmount) int { return cmp.Compare(a.Type, b.Type) })
	return q
}

// planLayouts lists the (stable, candidate) replica pairs that bound what
// a rollout requests at once: the layouts of its fixed stages and the
// corners of each rolling phase's reachable region (a rolling phase never
// grows the stable revision, never goes past target candidates, and keeps
// the total within the larger of target + maxSurge and where it started;
// what both revisions hold is linear in the pair, so its maximum over the
// region is at a corner, however slowly replicas become ready).
func planLayouts(hasStable bool, s RolloutSettings, T int) [][2]int {
	if !hasStable {
		return [][2]int{{0, T}}
	}
	surge, _ := surgeLimits(s)
	r := Rollout{Settings: s}
	out := [][2]int{{T, 0}}
	rolling := func(s0, c0 int) {
		b := max(s0+c0, T+surge)
		out = append(out, [2]int{s0, c0}, [2]int{s0, min(T, max(c0, b-s0))}, [2]int{min(s0, max(0, b-T)), T}, [2]int{0, T})
	}
	switch s.Strategy {
	case StrategyBlueGreen:
		out = append(out, [2]int{T, T}, [2]int{0, T})
	case StrategyCanary:
		st, c := T, 0
		for _, step := range s.Canary.Steps {
			st, c = r.canaryLayout(T, step.Weight)
			out = append(out, [2]int{st, c})
		}
		rolling(st, c)
	default:
		rolling(T, 0)
	}
	return out
}
