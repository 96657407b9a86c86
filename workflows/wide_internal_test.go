package workflows

import (
	"testing"

	"github.com/atelier-ml/atelier/pipeline"
)

// planWide covers the list with contiguous batches of at most
// spec.WideBatchMax items, and its window slots run exactly the step's
// parallelism, at most wideChildParallelism each, over at least two
// batches when it can.
func TestPlanWide(t *testing.T) {
	for _, tc := range []struct{ n, par int }{
		{1001, 1}, {1001, 2}, {1001, 7}, {1001, 100}, {2500, 300}, {5000, 150},
		{10_000, 1000}, {100_000, 1000}, {100_000, 999}, {100_000, 3}, {54_321, 250},
	} {
		p := planWide(tc.n, tc.par)
		next := 0
		for _, b := range p.batches {
			if b[0] != next || b[1] <= b[0] || b[1]-b[0] > pipeline.WideBatchMax {
				t.Fatalf("n=%d par=%d: batch %v after %d", tc.n, tc.par, b, next)
			}
			next = b[1]
		}
		if next != tc.n {
			t.Fatalf("n=%d par=%d: batches end at %d", tc.n, tc.par, next)
		}
		sum := 0
		for _, c := range p.slots {
			if c < 1 || c > wideChildParallelism {
				t.Fatalf("n=%d par=%d: slot of %d items", tc.n, tc.par, c)
			}
			sum += c
		}
		if sum != tc.par || len(p.slots) != p.window {
			t.Fatalf("n=%d par=%d: slots %v (window %d)", tc.n, tc.par, p.slots, p.window)
		}
		if tc.par >= 2 && p.window < 2 {
			t.Fatalf("n=%d par=%d: one batch at a time", tc.n, tc.par)
		}
		if len(p.batches) > 1 && p.batches[0][1]-p.batches[0][0] < p.childPar {
			t.Fatalf("n=%d par=%d: batches of %d items cannot fill %d slots", tc.n, tc.par, p.batches[0][1], p.childPar)
		}
	}
	// The benchmark's and the architecture doc's figures.
	if size, per, window := WidePlan(10_000, 1000); size != 250 || per != 100 || window != 10 {
		t.Errorf("WidePlan(10,000, 1,000) = %d, %d, %d", size, per, window)
	}
	if p := planWide(100_000, 1000); len(p.batches) != 100 || p.window != 10 {
		t.Errorf("100,000 items at 1,000: %d batches, window %d", len(p.batches), p.window)
	}
}
