package benchstack

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Summary describes a set of latency samples.
type Summary struct {
	N                  int
	P50, P90, P99, Max time.Duration
}

// Summarize computes nearest-rank percentiles of d (d is not modified).
func Summarize(d []time.Duration) Summary {
	if len(d) == 0 {
		return Summary{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return Summary{N: len(s), P50: Pct(s, 50), P90: Pct(s, 90), P99: Pct(s, 99), Max: s[len(s)-1]}
}

// Pct is the nearest-rank p-th percentile of sorted samples.
func Pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// MinMax returns the smallest and largest of d.
func MinMax(d []time.Duration) (time.Duration, time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	return slices.Min(d), slices.Max(d)
}

// Ms formats d in milliseconds with two decimals.
func Ms(d time.Duration) string {
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond))
}

// Ratio formats a/b as "1.23×".
func Ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// Verdict is "meets" or "MISSES" (a printed target, never an assertion).
func Verdict(ok bool) string {
	if ok {
		return "meets"
	}
	return "MISSES"
}
