package inference

import (
	"math"
	"slices"
	"time"
)

// LatencyBoundsMs are the upper bounds (milliseconds) of LatencyHistogram's
// buckets; a last, unbounded bucket holds slower requests. They span a
// cached token (a few ms) to a long generation (a minute), roughly doubling,
// so a p99 read from them is within a factor of about 2.5 of the truth,
// which is the precision a "p99 above N ms" gate needs.
var LatencyBoundsMs = []float64{5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}

// LatencyHistogram counts requests by latency bucket (LatencyBoundsMs, then
// one overflow bucket). Histograms add up, so the gateway can send counts
// since its last report and the endpoint's workflow can sum them into a
// window.
type LatencyHistogram struct {
	Counts []int64 `json:"counts,omitempty"`
}

// Observe counts one request that took d.
func (h *LatencyHistogram) Observe(d time.Duration) {
	ms := float64(d) / float64(time.Millisecond)
	i, _ := slices.BinarySearch(LatencyBoundsMs, ms)
	h.grow()
	h.Counts[i]++
}

// Add adds o's counts to h.
func (h *LatencyHistogram) Add(o LatencyHistogram) {
	if len(o.Counts) == 0 {
		return
	}
	h.grow()
	for i, c := range o.Counts {
		if i < len(h.Counts) && c > 0 {
			h.Counts[i] += c
		}
	}
}

func (h *LatencyHistogram) grow() {
	if len(h.Counts) < len(LatencyBoundsMs)+1 {
		h.Counts = append(h.Counts, make([]int64, len(LatencyBoundsMs)+1-len(h.Counts))...)
	}
}

// Total is the number of requests counted.
func (h LatencyHistogram) Total() int64 {
	var n int64
	for _, c := range h.Counts {
		n += max(c, 0)
	}
	return n
}

// Quantile is the upper bound of the bucket holding quantile q (0 < q ≤ 1),
// so the answer errs on the slow side: a latency gate never passes on a
// rounding. It is NaN without samples (unknown, see TrafficGates) and +Inf
// when the quantile lies in the overflow bucket.
func (h LatencyHistogram) Quantile(q float64) float64 {
	total := h.Total()
	if total == 0 || q <= 0 || q > 1 {
		return math.NaN()
	}
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i, c := range h.Counts {
		seen += max(c, 0)
		if seen >= rank {
			if i < len(LatencyBoundsMs) {
				return LatencyBoundsMs[i]
			}
			return math.Inf(1)
		}
	}
	return math.Inf(1)
}

// RevisionTraffic is what the gateway's endpoint proxy saw of one
// revision's requests over a period: how many, how many failed (a 5xx
// from the engine, or no answer at all) and how long they took.
type RevisionTraffic struct {
	Revision int              `json:"revision"`
	Requests int64            `json:"requests"`
	Errors   int64            `json:"errors,omitempty"`
	Latency  LatencyHistogram `json:"latency"`
}

// Add sums o into t (same revision).
func (t *RevisionTraffic) Add(o RevisionTraffic) {
	t.Requests += max(o.Requests, 0)
	t.Errors += max(o.Errors, 0)
	t.Latency.Add(o.Latency)
}

// TrafficWindow sums one revision's traffic from a start time: the window
// a rollout step's traffic gates judge (Step.MeasureFrom).
type TrafficWindow struct {
	Revision int       `json:"revision"`
	From     time.Time `json:"from"`
	RevisionTraffic
}

// Status puts the window's figures into st, which then counts as having
// known metrics: a window the proxy has reported on, even with no request,
// is "0 samples", which the gates answer with insufficient samples. A p99
// in the overflow bucket is reported as the largest bound's double, a
// finite figure above any sane threshold.
func (w TrafficWindow) Status(st RevisionStatus) RevisionStatus {
	st.MetricsKnown = true
	st.Requests, st.Errors = w.Requests, w.Errors
	p99 := w.Latency.Quantile(0.99)
	if math.IsInf(p99, 1) {
		p99 = 2 * LatencyBoundsMs[len(LatencyBoundsMs)-1]
	}
	st.P99LatencyMs = p99
	return st
}
