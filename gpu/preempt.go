package gpu

import (
	"cmp"
	"slices"
)

// candidate is a running workload that may be evicted for a preemptor.
type candidate struct {
	run    int32
	reason PreemptionReason
}

// buildCandidates lists a cohort's running workloads in victim order:
// lowest base priority first, then most recently admitted, then ID.
func (st *state) buildCandidates(ci int32) {
	c := &st.cohorts[ci]
	if c.built {
		return
	}
	c.built = true
	for i := range st.running {
		r := &st.running[i]
		if r.proj >= 0 && st.projs[r.proj].cohort == ci && r.old {
			c.candidates = append(c.candidates, int32(i))
		}
	}
	slices.SortFunc(c.candidates, func(a, b int32) int {
		x, y := &st.running[a], &st.running[b]
		if c := cmp.Compare(x.base, y.base); c != 0 {
			return c
		}
		if c := y.r.Admitted.Compare(x.r.Admitted); c != 0 {
			return c
		}
		return cmp.Compare(x.r.ID, y.r.ID)
	})
}

// mayPreempt is a cheap necessary condition for tryPreempt to find a
// victim, so that most blocked workloads cost O(needs).
func (st *state) mayPreempt(it *item) bool {
	p := &st.projs[it.proj]
	if p.minOldBase < it.base {
		return true // a lower-priority workload of its own project
	}
	c := &st.cohorts[p.cohort]
	for _, n := range it.needs {
		if c.borrowed[n.res]-max(0, p.usage[n.res]-p.nominal[n.res]) > 0 {
			// Another project borrows n: reclaim if within nominal, or
			// priority if some running workload is lower.
			if p.usage[n.res]+n.units <= p.nominal[n.res] || c.minOldBase < it.base {
				return true
			}
		}
	}
	return false
}

// tryPreempt looks for victims that make room for item i (see the package
// documentation for the rules). On success it records the preemptions,
// holds the free part of the future placement and charges the quota, and
// appends the Wait; it reports whether it did.
func (st *state) tryPreempt(i int32, wait *Wait) bool {
	it := &st.items[i]
	if st.searches <= 0 || !st.mayPreempt(it) {
		return false
	}
	st.searches--
	p := &st.projs[it.proj]
	st.buildCandidates(p.cohort)
	reclaim := true
	for _, n := range it.needs {
		if p.usage[n.res]+n.units > p.nominal[n.res] {
			reclaim = false
		}
	}
	st.searching = true
	defer func() { st.searching = false }()
	cands := st.cands[:0]
	n := 0
	fits := false
	for _, ri := range st.cohorts[p.cohort].candidates {
		r := &st.running[ri]
		if r.victim || !sharesResource(r.needs, it.needs) {
			continue
		}
		var reason PreemptionReason
		switch {
		case r.proj == it.proj:
			if r.base < it.base {
				reason = Priority
			}
		// Another project's workload only while that project borrows
		// (with the victims chosen so far gone).
		case st.borrowsAny(r.proj, it.needs):
			if reclaim {
				reason = ReclaimQuota
			} else if r.base < it.base {
				reason = Priority
			}
		}
		if reason == "" {
			continue
		}
		cands = append(cands, candidate{ri, reason})
		st.evict(ri, 1)
		n++
		if st.fitsNow(it) {
			fits = true
			break
		}
	}
	st.cands = cands
	if !fits {
		for _, c := range cands[:n] {
			st.evict(c.run, -1)
		}
		if n > 0 {
			wait.PreemptionFutile = true
		}
		return false
	}
	// Spare what is not needed, trying the most valuable victims first.
	keep := make([]bool, n)
	for k := range keep {
		keep[k] = true
	}
	for k := n - 2; k >= 0; k-- {
		st.evict(cands[k].run, -1)
		if st.fitsNow(it) {
			keep[k] = false
		} else {
			st.evict(cands[k].run, 1)
		}
	}
	// The placement it will get once the victims are gone.
	st.place(it, false)
	type target struct {
		slot  int32
		units int
	}
	targets := make([]target, 0, len(st.scratch))
	for _, pl := range st.scratch {
		targets = append(targets, target{pl.slot, pl.units})
	}
	st.undo()
	for k := range n {
		if keep[k] {
			st.evict(cands[k].run, -1)
		}
	}
	for k := range n {
		if !keep[k] {
			continue
		}
		r := &st.running[cands[k].run]
		r.victim = true
		wait.Victims = append(wait.Victims, r.r.ID)
		st.plan.Preemptions = append(st.plan.Preemptions, Preemption{Victim: r.r.ID, Reason: cands[k].reason, For: it.w.ID})
	}
	st.holdTargets(i, ReservePreempting, func(yield func(int32, int)) {
		for _, t := range targets {
			yield(t.slot, t.units)
		}
	})
	for _, nd := range it.needs {
		st.charge(it.proj, nd.res, nd.units)
	}
	wait.Reason = WaitPreemption
	wait.HoldsReservation = true
	return true
}

func sharesResource(a, b []need) bool {
	for _, x := range a {
		for _, y := range b {
			if x.res == y.res {
				return true
			}
		}
	}
	return false
}

// borrowsAny reports whether project q uses more than its nominal of a
// resource in needs.
func (st *state) borrowsAny(q int32, needs []need) bool {
	p := &st.projs[q]
	for _, n := range needs {
		if p.usage[n.res] > p.nominal[n.res] {
			return true
		}
	}
	return false
}

// evict removes (dir 1) or restores (dir -1) a running workload's quota
// usage and node capacity, for a victim search.
func (st *state) evict(ri int32, dir int) {
	r := &st.running[ri]
	for _, n := range r.needs {
		st.charge(r.proj, n.res, -dir*n.units)
	}
	for _, a := range r.r.Placement {
		if a.PodSet < 0 || a.PodSet >= len(r.r.PodSets) {
			continue
		}
		ps := &r.r.PodSets[a.PodSet]
		si := st.slotOf(a.Node, ps.Resource)
		if si < 0 {
			continue
		}
		u := dir * a.Pods * ps.Per
		sl := &st.slots[si]
		if sl.cap == 0 {
			continue // node not schedulable: nothing to free
		}
		sl.free += u
		rs := &st.res[sl.res]
		rs.free += u
		rs.maxFree = max(rs.maxFree, sl.free)
	}
}

// fitsNow reports whether the item fits quota and free capacity as they
// stand (without using reservations); it leaves nothing placed.
func (st *state) fitsNow(it *item) bool {
	if _, bad := st.quotaFails(it); bad {
		return false
	}
	for _, n := range it.needs {
		if st.res[n.res].free < n.units {
			return false
		}
	}
	if !st.place(it, false) {
		return false
	}
	st.undo()
	return true
}
