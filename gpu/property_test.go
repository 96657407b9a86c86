package gpu

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"
)

// The properties run a random cluster through several cycles: workloads
// arrive, Schedule decides, the test applies the plan (admissions start,
// victims end at once) and random running workloads finish, and every plan
// and state is checked. The checker below is an independent, simple model
// of capacity and quota (maps, no aggregates).

var propResources = []Resource{a100, h100, mig1}

func genNode(t *rapid.T, i int) Node {
	typ := rapid.SampledFrom(propResources).Draw(t, "type")
	n := Node{Name: fmt.Sprintf("node-%02d", i), Ready: rapid.IntRange(0, 9).Draw(t, "ready") > 0,
		Unschedulable: rapid.IntRange(0, 14).Draw(t, "cordon") == 0}
	if typ == mig1 {
		n.GPUType, n.GPUs = a100, 0
		n.MIG = []MIGSlices{{Profile: mig1, Allocatable: 7, InUse: rapid.IntRange(0, 2).Draw(t, "migInUse")}}
	} else {
		n.GPUType = typ
		n.GPUs = rapid.SampledFrom([]int{1, 2, 4, 8}).Draw(t, "gpus")
		n.GPUsInUse = rapid.IntRange(0, 1).Draw(t, "inUse")
	}
	if rapid.IntRange(0, 7).Draw(t, "tainted") == 0 {
		n.Taints = []Taint{{Key: "dedicated", Value: "x", Effect: rapid.SampledFrom([]TaintEffect{NoSchedule, NoExecute, PreferNoSchedule}).Draw(t, "effect")}}
	}
	return n
}

func genLimit(t *rapid.T, label string) Limit {
	return rapid.SampledFrom([]Limit{0, 2, 4, Unlimited}).Draw(t, label)
}

func genPolicy(t *rapid.T) Policy {
	n := rapid.IntRange(1, 5).Draw(t, "projects")
	pol := Policy{AgingStep: 10 * time.Minute, AgingCap: rapid.IntRange(-1, 5).Draw(t, "agingCap"), MinRuntime: 15 * time.Minute}
	for i := range n {
		pp := ProjectPolicy{Name: fmt.Sprintf("p%d", i), Cohort: rapid.SampledFrom([]string{"", "", "blue"}).Draw(t, "cohort"),
			Weight: float64(rapid.IntRange(1, 3).Draw(t, "weight")), MinPriority: 0, MaxPriority: 10,
			DefaultPriority: rapid.IntRange(0, 10).Draw(t, "defaultPriority")}
		for _, r := range propResources {
			if rapid.IntRange(0, 3).Draw(t, "hasQuota") > 0 {
				pp.Quotas = append(pp.Quotas, Quota{Resource: r, Nominal: rapid.IntRange(0, 16).Draw(t, "nominal"),
					BorrowingLimit: genLimit(t, "borrow"), LendingLimit: genLimit(t, "lend")})
			}
		}
		pol.Projects = append(pol.Projects, pp)
	}
	return pol
}

func genWorkload(t *rapid.T, id int, pol Policy, now time.Time) Workload {
	w := Workload{ID: fmt.Sprintf("w%03d", id), Submitted: now,
		Project: pol.Projects[rapid.IntRange(0, len(pol.Projects)-1).Draw(t, "project")].Name}
	if rapid.IntRange(0, 2).Draw(t, "hasPriority") > 0 {
		w.Priority = prio(rapid.IntRange(0, 10).Draw(t, "priority"))
	}
	rs := slices.Clone(propResources)
	sets := rapid.IntRange(1, 2).Draw(t, "podSets")
	for k := range sets {
		j := rapid.IntRange(0, len(rs)-1).Draw(t, "resource")
		r := rs[j]
		rs = slices.Delete(rs, j, j+1) // distinct resources per gang
		ps := PodSet{Name: fmt.Sprint(k), Resource: r, Count: rapid.IntRange(1, 4).Draw(t, "count"),
			Per: rapid.SampledFrom([]int{1, 1, 2, 4, 8}).Draw(t, "per")}
		if r == mig1 {
			ps.Per = rapid.IntRange(1, 2).Draw(t, "perMIG")
		}
		if rapid.IntRange(0, 3).Draw(t, "tolerates") == 0 {
			ps.Tolerations = []Toleration{{Key: "dedicated", Operator: "Exists"}}
		}
		w.PodSets = append(w.PodSets, ps)
	}
	w.NoPreempt = rapid.IntRange(0, 9).Draw(t, "noPreempt") == 0
	return w
}

// model is the checker's view of a cycle.
type model struct {
	s      Snapshot
	proj   map[string]*ProjectPolicy
	node   map[string]*Node
	used   map[string]int // node/resource -> units held by Atelier
	usage  map[string]int // project/resource -> units
	runner map[string]*Running
}

func key(a string, r Resource) string { return a + "/" + string(r) }

func newModel(s Snapshot) *model {
	m := &model{s: s, proj: map[string]*ProjectPolicy{}, node: map[string]*Node{}, used: map[string]int{}, usage: map[string]int{}, runner: map[string]*Running{}}
	for i := range s.Policy.Projects {
		m.proj[s.Policy.Projects[i].Name] = &s.Policy.Projects[i]
	}
	for i := range s.Inventory.Nodes {
		m.node[s.Inventory.Nodes[i].Name] = &s.Inventory.Nodes[i]
	}
	for i := range s.Running {
		m.add(&s.Running[i].Workload, s.Running[i].Placement, 1)
		m.runner[s.Running[i].ID] = &s.Running[i]
	}
	return m
}

func (m *model) add(w *Workload, pl []Assignment, dir int) {
	for _, a := range pl {
		ps := w.PodSets[a.PodSet]
		m.used[key(a.Node, ps.Resource)] += dir * a.Pods * ps.Per
	}
	m.charge(w, dir)
}

func (m *model) charge(w *Workload, dir int) {
	for _, ps := range w.PodSets {
		m.usage[key(w.Project, ps.Resource)] += dir * ps.Count * ps.Per
	}
}

func (m *model) quota(p string, r Resource) Quota {
	if pp := m.proj[p]; pp != nil {
		for _, q := range pp.Quotas {
			if q.Resource == r {
				return q
			}
		}
	}
	return Quota{Resource: r}
}

func cohortName(pp *ProjectPolicy) string {
	if pp.Cohort == "" {
		return DefaultCohort
	}
	return pp.Cohort
}

// quotaOK checks property 2 for every project and resource.
func (m *model) quotaOK() error {
	pool := map[string]int{}
	lent := map[string]int{}
	for _, pp := range m.s.Policy.Projects {
		for _, r := range propResources {
			q := m.quota(pp.Name, r)
			u := m.usage[key(pp.Name, r)]
			if q.BorrowingLimit != Unlimited && u > q.Nominal+int(q.BorrowingLimit) {
				return fmt.Errorf("project %s uses %d %s > nominal %d + borrowing limit %d", pp.Name, u, r, q.Nominal, q.BorrowingLimit)
			}
			lendable := q.Nominal
			if q.LendingLimit != Unlimited {
				lendable = min(lendable, int(q.LendingLimit))
			}
			c := key(cohortName(&pp), r)
			pool[c] += lendable
			lent[c] += max(0, u-(q.Nominal-lendable))
		}
	}
	for c, l := range lent {
		if l > pool[c] {
			return fmt.Errorf("cohort/resource %s: %d taken from the pool, which holds %d lendable", c, l, pool[c])
		}
	}
	return nil
}

func (m *model) offered(n *Node, r Resource) int {
	if !n.Ready || n.Unschedulable {
		return 0
	}
	if n.GPUType == r {
		return n.GPUs - n.GPUsInUse
	}
	for _, s := range n.MIG {
		if s.Profile == r {
			return s.Allocatable - s.InUse
		}
	}
	return 0
}

func tolerates(n *Node, ps PodSet) bool {
	for _, x := range n.Taints {
		if x.Effect == PreferNoSchedule {
			continue
		}
		ok := false
		for _, t := range ps.Tolerations {
			ok = ok || t.tolerates(x)
		}
		if !ok {
			return false
		}
	}
	return true
}

// checkPlacement checks property 1 for an admission.
func (m *model) checkPlacement(w *Workload, pl []Assignment) error {
	pods := make([]int, len(w.PodSets))
	for _, a := range pl {
		n := m.node[a.Node]
		if n == nil {
			return fmt.Errorf("%s placed on unknown node %s", w.ID, a.Node)
		}
		ps := w.PodSets[a.PodSet]
		if !tolerates(n, ps) {
			return fmt.Errorf("%s placed on %s without tolerating its taints", w.ID, a.Node)
		}
		if m.used[key(a.Node, ps.Resource)] > m.offered(n, ps.Resource) {
			return fmt.Errorf("%s overcommits %s on %s: %d used > %d offered", w.ID, ps.Resource, a.Node, m.used[key(a.Node, ps.Resource)], m.offered(n, ps.Resource))
		}
		pods[a.PodSet] += a.Pods
	}
	for k, ps := range w.PodSets {
		if pods[k] != ps.Count {
			return fmt.Errorf("%s pod set %d: %d pods placed, want %d (all or nothing)", w.ID, k, pods[k], ps.Count)
		}
	}
	return nil
}

// fits is the checker's own fit test: quota headroom and a first-fit
// placement on free units (offered - used - held).
func (m *model) fits(w *Workload, held map[string]int) bool {
	m.charge(w, 1)
	err := m.quotaOK()
	m.charge(w, -1)
	if err != nil {
		return false
	}
	names := slices.Sorted(maps.Keys(m.node))
	for _, ps := range w.PodSets {
		left := ps.Count
		for _, name := range names {
			n := m.node[name]
			if !tolerates(n, ps) {
				continue
			}
			free := m.offered(n, ps.Resource) - m.used[key(name, ps.Resource)] - held[key(name, ps.Resource)]
			left -= min(left, max(0, free)/ps.Per)
		}
		if left > 0 {
			return false
		}
	}
	return true
}

func basePrio(pol *Policy, w *Workload) int {
	if w.Priority != nil {
		return *w.Priority
	}
	for _, p := range pol.Projects {
		if p.Name == w.Project {
			return p.DefaultPriority
		}
	}
	return 0
}

// checkPlan checks properties 1, 2, 4 (no preemption power from aging),
// 6 and 7 on one cycle's plan.
func checkPlan(s Snapshot, plan Plan) error {
	m := newModel(s)
	pend := map[string]*Workload{}
	for i := range s.Pending {
		pend[s.Pending[i].ID] = &s.Pending[i]
	}
	decided := map[string]bool{}
	for _, a := range plan.Admissions {
		decided[a.Workload] = true
	}
	for _, w := range plan.Waits {
		if decided[w.Workload] {
			return fmt.Errorf("%s both admitted and waiting", w.Workload)
		}
		decided[w.Workload] = true
	}
	if len(decided) != len(s.Pending) {
		return fmt.Errorf("%d pending, %d decided: every pending workload needs an admission or a Wait", len(s.Pending), len(decided))
	}
	// 1, 2: admissions fit capacity and quota.
	for _, a := range plan.Admissions {
		w := pend[a.Workload]
		m.add(w, a.Placement, 1)
		if err := m.checkPlacement(w, a.Placement); err != nil {
			return err
		}
	}
	if err := m.quotaOK(); err != nil {
		return fmt.Errorf("after admissions: %w", err)
	}
	// 6: preemption rules. Borrowing is judged at decision time, when
	// usage is at most the snapshot's plus this cycle's admissions and
	// holds (upper model); a preemptor's own usage is at least the
	// snapshot's minus all victims (lower model).
	before := newModel(s)
	victims := map[string]bool{}
	for _, p := range plan.Preemptions {
		if before.runner[p.Victim] == nil || victims[p.Victim] {
			return fmt.Errorf("bad preemption %+v", p)
		}
		victims[p.Victim] = true
	}
	upper, lower := newModel(s), newModel(s)
	for _, a := range plan.Admissions {
		upper.charge(pend[a.Workload], 1)
	}
	for _, w := range plan.Waits {
		if w.Reason == WaitPreemption {
			upper.charge(pend[w.Workload], 1)
		}
	}
	for id := range victims {
		lower.charge(&lower.runner[id].Workload, -1)
	}
	for _, p := range plan.Preemptions {
		v, f := before.runner[p.Victim], pend[p.For]
		if f == nil {
			return fmt.Errorf("bad preemption %+v", p)
		}
		if v.NoPreempt {
			return fmt.Errorf("%s preempted although NoPreempt", v.ID)
		}
		if s.Now.Sub(v.Admitted) < s.Policy.MinRuntime {
			return fmt.Errorf("%s preempted after running %v < MinRuntime", v.ID, s.Now.Sub(v.Admitted))
		}
		vp, fp := before.proj[v.Project], before.proj[f.Project]
		if cohortName(vp) != cohortName(fp) {
			return fmt.Errorf("%s preempted across cohorts for %s", v.ID, f.ID)
		}
		borrowing := false
		for _, ps := range v.PodSets {
			borrowing = borrowing || upper.usage[key(v.Project, ps.Resource)] > before.quota(v.Project, ps.Resource).Nominal
		}
		switch p.Reason {
		case Priority:
			// Base priorities: aging gives no preemption power.
			if basePrio(&s.Policy, &v.Workload) >= basePrio(&s.Policy, f) {
				return fmt.Errorf("priority preemption of %s (base %d) for %s (base %d)", v.ID, basePrio(&s.Policy, &v.Workload), f.ID, basePrio(&s.Policy, f))
			}
			if v.Project != f.Project && !borrowing {
				return fmt.Errorf("priority preemption of %s from non-borrowing project %s", v.ID, v.Project)
			}
		case ReclaimQuota:
			if v.Project == f.Project || !borrowing {
				return fmt.Errorf("reclaim of %s from a project that does not borrow", v.ID)
			}
			for _, ps := range f.PodSets {
				if lower.usage[key(f.Project, ps.Resource)]+ps.Count*ps.Per > before.quota(f.Project, ps.Resource).Nominal {
					return fmt.Errorf("reclaim for %s which would exceed its nominal %s", f.ID, ps.Resource)
				}
			}
		}
	}
	// 6: once the victims are gone, every preemptor fits (in decision
	// order, after this cycle's admissions).
	after := newModel(s)
	for _, a := range plan.Admissions {
		after.add(pend[a.Workload], a.Placement, 1)
	}
	for id := range victims {
		after.add(&after.runner[id].Workload, after.runner[id].Placement, -1)
	}
	for _, w := range plan.Waits {
		if w.Reason != WaitPreemption {
			continue
		}
		if !after.fits(pend[w.Workload], nil) {
			return fmt.Errorf("%s preempted %v but would not fit after they leave", w.Workload, w.Victims)
		}
		after.charge(pend[w.Workload], 1)
		// Its placement is not modelled; take the capacity greedily.
		takeGreedy(after, pend[w.Workload])
	}
	// 7: no waiting workload fits what is left (reservations excluded,
	// preemption holds charged).
	held := map[string]int{}
	for _, r := range plan.Reservations {
		for _, n := range r.Nodes {
			held[key(n.Node, n.Resource)] += n.Units
		}
	}
	for _, w := range plan.Waits {
		if w.Reason == WaitPreemption {
			m.charge(pend[w.Workload], 1)
		}
	}
	for _, w := range plan.Waits {
		switch w.Reason {
		case WaitQuota, WaitCapacity, WaitNoNodeFits, WaitNeverFits:
			own := map[string]int{}
			for k, v := range held {
				own[k] = v
			}
			for _, r := range plan.Reservations {
				if r.Workload == w.Workload {
					for _, n := range r.Nodes {
						own[key(n.Node, n.Resource)] -= n.Units
					}
				}
			}
			if m.fits(pend[w.Workload], own) {
				return fmt.Errorf("%s waits (%s: %s) but fits free capacity and quota", w.Workload, w.Reason, w.Message())
			}
		}
	}
	return nil
}

func takeGreedy(m *model, w *Workload) {
	names := slices.Sorted(maps.Keys(m.node))
	for _, ps := range w.PodSets {
		left := ps.Count
		for _, name := range names {
			n := m.node[name]
			if !tolerates(n, ps) {
				continue
			}
			free := max(0, m.offered(n, ps.Resource)-m.used[key(name, ps.Resource)])
			k := min(left, free/ps.Per)
			m.used[key(name, ps.Resource)] += k * ps.Per
			left -= k
		}
	}
}

// checkFairOrder checks property 3: decisions follow the weighted
// dominant share, ties by effective priority, submit time, ID.
func checkFairOrder(s Snapshot, plan Plan) error {
	m := newModel(s)
	type dec struct {
		id      string
		pos     int
		charges bool
	}
	var decs []dec
	for _, a := range plan.Admissions {
		decs = append(decs, dec{a.Workload, a.Position, true})
	}
	for _, w := range plan.Waits {
		decs = append(decs, dec{w.Workload, w.Position, w.Reason == WaitPreemption})
	}
	slices.SortFunc(decs, func(a, b dec) int { return cmp.Compare(a.pos, b.pos) })
	for i, d := range decs {
		if d.pos != i+1 {
			return fmt.Errorf("positions are not 1..n: %d at %d", d.pos, i)
		}
	}
	pend := map[string]*Workload{}
	left := map[string]int{} // pending per project
	for i := range s.Pending {
		pend[s.Pending[i].ID] = &s.Pending[i]
		if m.proj[s.Pending[i].Project] != nil {
			left[s.Pending[i].Project]++
		}
	}
	share := func(p string) float64 {
		pp := m.proj[p]
		best := 0.0
		for _, r := range propResources {
			u := m.usage[key(p, r)]
			if u <= 0 {
				continue
			}
			base := m.quota(p, r).Nominal
			if base <= 0 {
				for _, q := range s.Policy.Projects {
					if cohortName(&q) == cohortName(pp) {
						base += m.quota(q.Name, r).Nominal
					}
				}
			}
			best = max(best, float64(u)/float64(max(1, base)))
		}
		w := pp.Weight
		if w <= 0 {
			w = 1
		}
		return best / w
	}
	for _, d := range decs {
		w := pend[d.id]
		if m.proj[w.Project] == nil {
			continue
		}
		mine := share(w.Project)
		for p, n := range left {
			if n > 0 && p != w.Project && share(p) < mine {
				return fmt.Errorf("%s (project %s, share %.3f) decided while project %s has a lower share %.3f and pending work", d.id, w.Project, mine, p, share(p))
			}
		}
		left[w.Project]--
		if d.charges {
			m.charge(w, 1)
		}
	}
	return nil
}

func shuffled(t *rapid.T, s Snapshot) Snapshot {
	perm := func(n int, label string) []int {
		return rapid.Permutation(func() []int {
			p := make([]int, n)
			for i := range p {
				p[i] = i
			}
			return p
		}()).Draw(t, label)
	}
	out := s
	out.Inventory.Nodes = nil
	for _, i := range perm(len(s.Inventory.Nodes), "pn") {
		out.Inventory.Nodes = append(out.Inventory.Nodes, s.Inventory.Nodes[i])
	}
	out.Policy.Projects = nil
	for _, i := range perm(len(s.Policy.Projects), "pp") {
		pp := s.Policy.Projects[i]
		pp.Quotas = slices.Clone(pp.Quotas)
		slices.Reverse(pp.Quotas)
		out.Policy.Projects = append(out.Policy.Projects, pp)
	}
	out.Running = nil
	for _, i := range perm(len(s.Running), "pr") {
		out.Running = append(out.Running, s.Running[i])
	}
	out.Pending = nil
	for _, i := range perm(len(s.Pending), "pw") {
		out.Pending = append(out.Pending, s.Pending[i])
	}
	return out
}

// TestScheduleProperties runs random clusters through several cycles and
// checks properties 1, 2, 3, 4, 6, 7 and 8 on every plan.
func TestScheduleProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var inv Inventory
		for i := range rapid.IntRange(1, 10).Draw(t, "nodes") {
			inv.Nodes = append(inv.Nodes, genNode(t, i))
		}
		pol := genPolicy(t)
		now := t0
		var run []Running
		var pending []Workload
		id := 0
		for cycle := range rapid.IntRange(1, 6).Draw(t, "cycles") {
			for range rapid.IntRange(0, 6).Draw(t, "arrivals") {
				pending = append(pending, genWorkload(t, id, pol, now.Add(-time.Duration(rapid.IntRange(0, 60).Draw(t, "age"))*time.Minute)))
				id++
			}
			snap := Snapshot{Now: now, Inventory: inv, Policy: pol, Running: run, Pending: pending}
			plan := Schedule(snap)
			if err := checkPlan(snap, plan); err != nil {
				t.Fatalf("cycle %d: %v", cycle, err)
			}
			if err := checkFairOrder(snap, plan); err != nil {
				t.Fatalf("cycle %d: %v", cycle, err)
			}
			// 8: determinism under shuffled input.
			if diff := gocmp.Diff(plan, Schedule(shuffled(t, snap)), cmpopts.EquateErrors(), cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("cycle %d: plan depends on input order (-first +shuffled):\n%s", cycle, diff)
			}
			// Apply: admissions start, victims and random workloads end.
			victims := map[string]bool{}
			for _, p := range plan.Preemptions {
				victims[p.Victim] = true
			}
			var next []Running
			for _, r := range run {
				if !victims[r.ID] && rapid.IntRange(0, 3).Draw(t, "keeps") > 0 {
					next = append(next, r)
				}
			}
			admitted := map[string]bool{}
			for _, a := range plan.Admissions {
				admitted[a.Workload] = true
				for _, w := range pending {
					if w.ID == a.Workload {
						next = append(next, Running{Workload: w, Admitted: now, Placement: a.Placement, Borrowed: len(a.Borrowed) > 0})
					}
				}
			}
			pending = slices.DeleteFunc(pending, func(w Workload) bool { return admitted[w.ID] })
			run = next
			now = now.Add(time.Duration(rapid.IntRange(1, 30).Draw(t, "step")) * time.Minute)
		}
	})
}

// TestAgingProperty: effective priority never falls as a workload waits,
// never exceeds base + AgingCap, and grows by one per AgingStep.
func TestAgingProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		step := time.Duration(rapid.IntRange(1, 120).Draw(t, "stepMin")) * time.Minute
		capN := rapid.IntRange(0, 20).Draw(t, "cap")
		a := rapid.IntRange(0, 10000).Draw(t, "waitA")
		b := rapid.IntRange(a, 20000).Draw(t, "waitB")
		st := &state{now: t0, agingStep: step, agingCap: capN}
		ea := st.aging(t0.Add(-time.Duration(a) * time.Minute))
		eb := st.aging(t0.Add(-time.Duration(b) * time.Minute))
		if ea > eb || eb > capN || ea < 0 {
			t.Fatalf("aging(%d min)=%d, aging(%d min)=%d, cap %d", a, ea, b, eb, capN)
		}
		if want := min(capN, int(time.Duration(a)*time.Minute/step)); ea != want {
			t.Fatalf("aging(%d min)=%d, want %d", a, ea, want)
		}
	})
}

// TestReservationBoundsWaiting checks property 5: a big gang blocked
// behind running work while a stream of small workloads keeps arriving
// (each of which fits freed capacity and would, without the reservation,
// take it first) is admitted within a bound once running work ends. Every
// workload runs at most maxRun cycles; a reservation moves only to nodes
// with strictly more free units, so the gang waits at most
// (units+1)·maxRun cycles.
func TestReservationBoundsWaiting(t *testing.T) {
	var waited, runs atomic.Int64
	defer func() {
		t.Logf("big waited %.1f cycles on average", float64(waited.Load())/float64(max(1, runs.Load())))
	}()
	rapid.Check(t, func(t *rapid.T) {
		runs.Add(1)
		const maxRun = 4
		var inv Inventory
		total, biggest := 0, 0
		for i := range rapid.IntRange(1, 6).Draw(t, "nodes") {
			g := rapid.SampledFrom([]int{2, 4, 8}).Draw(t, "gpus")
			inv.Nodes = append(inv.Nodes, gpuNode(fmt.Sprintf("n%d", i), a100, g))
			total += g
			biggest = max(biggest, g)
		}
		pol := Policy{MinRuntime: -1, AgingCap: -1, Projects: []ProjectPolicy{
			project("a", quota(a100, 1000, 0, 0)), project("b", quota(a100, 1000, 0, 0))}}
		per := rapid.IntRange(1, biggest).Draw(t, "per")
		fitting := 0
		for _, n := range inv.Nodes {
			fitting += n.GPUs / per
		}
		big := wl("big", "a", t0, rapid.IntRange(1, fitting).Draw(t, "count"), per, a100)
		ends := map[string]int{} // running workload -> cycle it ends
		var run []Running
		now := t0
		id := 0
		smalls := func(cycle int) []Workload {
			var out []Workload
			for range rapid.IntRange(1, 3).Draw(t, "arrivals") {
				out = append(out, wl(fmt.Sprintf("s%03d", id), "b", now, 1, rapid.IntRange(1, 2).Draw(t, "smallPer"), a100))
				id++
			}
			return out
		}
		// Fill the cluster with b's work first.
		pending := smalls(0)
		for range total {
			pending = append(pending, smalls(0)...)
		}
		bound := (big.PodSets[0].Count*per + 1) * maxRun
		for cycle := range bound + 2 + 1 {
			if cycle == 1 {
				pending = append(pending, big)
			}
			snap := Snapshot{Now: now, Inventory: inv, Policy: pol, Running: run, Pending: pending}
			plan := Schedule(snap)
			if err := checkPlan(snap, plan); err != nil {
				t.Fatalf("cycle %d: %v", cycle, err)
			}
			admitted := map[string]bool{}
			for _, a := range plan.Admissions {
				admitted[a.Workload] = true
				for _, w := range pending {
					if w.ID == a.Workload {
						run = append(run, Running{Workload: w, Admitted: now, Placement: a.Placement})
						ends[w.ID] = cycle + rapid.IntRange(1, maxRun).Draw(t, "runFor")
					}
				}
			}
			if admitted["big"] {
				waited.Add(int64(cycle - 1))
				return
			}
			if cycle >= 1 {
				if cycle-1 > bound {
					t.Fatalf("big (%d×%d on %d GPUs) still waiting after %d cycles (bound %d)", big.PodSets[0].Count, per, total, cycle-1, bound)
				}
				holds := false
				for _, r := range plan.Reservations {
					holds = holds || r.Workload == "big"
				}
				if !holds {
					t.Fatalf("cycle %d: big waits without a reservation: %+v", cycle, plan.Waits)
				}
			}
			pending = slices.DeleteFunc(pending, func(w Workload) bool { return admitted[w.ID] })
			run = slices.DeleteFunc(run, func(r Running) bool { return ends[r.ID] <= cycle+1 })
			now = now.Add(time.Minute)
			pending = append(pending, smalls(cycle+1)...)
		}
		t.Fatalf("big never admitted")
	})
}

// TestDuplicateIDsProperty compares the hash-and-sort duplicate detection
// with a map.
func TestDuplicateIDsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ids := rapid.SliceOf(rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f", "g", "h", "long-id-0001", "long-id-0002"})).Draw(t, "ids")
		split := rapid.IntRange(0, len(ids)).Draw(t, "split")
		var s Snapshot
		for _, id := range ids[:split] {
			s.Pending = append(s.Pending, Workload{ID: id})
		}
		for _, id := range ids[split:] {
			s.Running = append(s.Running, Running{Workload: Workload{ID: id}})
		}
		count := map[string]int{}
		for _, id := range ids {
			count[id]++
		}
		got := duplicateIDs(&s)
		for i, w := range s.Pending {
			if got[i] != (count[w.ID] > 1) {
				t.Fatalf("pending %d (%q): duplicate = %v, want %v", i, w.ID, got[i], count[w.ID] > 1)
			}
		}
	})
}
