package gpu

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"time"
)

// Schedule decides one admission cycle: which pending workloads start now
// and where, which running workloads are preempted and for whom, which
// capacity is held, and why every other pending workload waits. It is a
// pure function of the snapshot: no clock, no I/O, no goroutines, and the
// order of the snapshot's slices does not change the plan. See the package
// documentation for the rules.
func Schedule(s Snapshot) Plan {
	st := newState(&s)
	st.run()
	return st.plan
}

// need is a gang's total of one resource.
type need struct {
	res   int32
	units int
}

// item is one pending workload.
type item struct {
	w          *Workload
	proj       int32
	base, eff  int
	needs      []need // sorted by res
	invalid    error
	submitNano int64
}

type slot struct {
	node     int32
	res      int32
	free     int // free units now, after running, admissions and holds
	reserved int // held this cycle
	cap      int // what the node offers with no Atelier workload (0 if not schedulable)
	tmp      int // scratch for reservation targeting
}

type resState struct {
	name     Resource
	slots    []int32 // into state.slots, node-name order
	free     int
	reserved int
	maxFree  int // upper bound on any slot's free
	holder   int32
	holderID string
	failed   [2][]shape // pod-set shapes that did not fit (without, with reservations)
}

type nodeState struct {
	name   string
	taints []Taint // NoSchedule / NoExecute only
	slots  []nodeSlot
}

type nodeSlot struct {
	res  int32
	slot int32
}

type projState struct {
	pol        *ProjectPolicy
	cohort     int32
	weight     float64
	nominal    []int
	borrowLim  []int // -1: unlimited
	lendable   []int
	usage      []int
	queue      []qkey
	head       int
	share      float64
	minOldBase int // lowest base priority of a preemptible running workload
}

type cohortState struct {
	name         string
	poolCap      []int
	poolUsed     []int
	nominalTotal []int
	borrowed     []int   // Σ over projects of usage above nominal
	minOldBase   int     // lowest base priority of a preemptible running workload
	candidates   []int32 // running workloads, lazily built, preemption order
	built        bool
}

type runState struct {
	r       *Running
	proj    int32 // -1: unknown project
	base    int
	needs   []need
	victim  bool
	old     bool // may be a victim: ran at least MinRuntime and not NoPreempt
	project string
}

type state struct {
	s       *Snapshot
	now     time.Time
	resIdx  map[Resource]int32
	res     []resState
	slots   []slot
	nodes   []nodeState
	nodeIdx map[string]int32
	projIdx map[string]int32
	projs   []projState
	cohorts []cohortState
	items   []item
	running []runState

	agingStep  time.Duration
	agingCap   int
	minRuntime time.Duration
	searches   int
	searching  bool // victims are evicted: free units are temporarily higher

	heap    []int32
	scratch []placed
	cands   []candidate
	// quotaSlab holds the QuotaShortfall values Waits point to.
	quotaSlab []QuotaShortfall
	plan      Plan
}

// placed is one tentative assignment (for undo).
type placed struct {
	podSet int
	res    int32
	slot   int32
	pods   int
	units  int
}

// find returns r's index, or -1.
func (st *state) find(r Resource) int32 {
	if len(st.res) <= 16 {
		for i := range st.res {
			if st.res[i].name == r {
				return int32(i)
			}
		}
		return -1
	}
	if i, ok := st.resIdx[r]; ok {
		return i
	}
	return -1
}

func (st *state) resource(r Resource) int32 {
	// Few distinct resources: a scan beats hashing the name.
	if len(st.res) <= 16 {
		for i := range st.res {
			if st.res[i].name == r {
				return int32(i)
			}
		}
	} else if i, ok := st.resIdx[r]; ok {
		return i
	}
	i := int32(len(st.res))
	st.resIdx[r] = i
	st.res = append(st.res, resState{name: r, holder: -1})
	return i
}

func newState(s *Snapshot) *state {
	st := &state{s: s, now: s.Now, resIdx: map[Resource]int32{}, nodeIdx: make(map[string]int32, len(s.Inventory.Nodes)),
		projIdx: make(map[string]int32, len(s.Policy.Projects))}
	p := &s.Policy
	st.agingStep, st.agingCap, st.minRuntime = p.AgingStep, p.AgingCap, p.MinRuntime
	if st.agingStep <= 0 {
		st.agingStep = DefaultAgingStep
	}
	if st.agingCap == 0 {
		st.agingCap = DefaultAgingCap
	}
	if st.minRuntime == 0 {
		st.minRuntime = DefaultMinRuntime
	}
	st.searches = p.MaxPreemptionSearches
	if st.searches <= 0 {
		st.searches = DefaultMaxPreemptionSearches
	}

	// Nodes, sorted by name; resources named in node order so that the
	// indices do not depend on input order.
	nodes := make([]*Node, len(s.Inventory.Nodes))
	for i := range s.Inventory.Nodes {
		nodes[i] = &s.Inventory.Nodes[i]
	}
	byName := func(a, b *Node) int { return cmp.Compare(a.Name, b.Name) }
	if !slices.IsSortedFunc(nodes, byName) { // inventories are often kept sorted
		slices.SortStableFunc(nodes, byName)
	}
	st.nodes = make([]nodeState, 0, len(nodes))
	var names []Resource
	for _, n := range nodes {
		if n.GPUType != "" {
			names = append(names, n.GPUType)
		}
		for _, m := range n.MIG {
			names = append(names, m.Profile)
		}
	}
	for i := range p.Projects {
		for _, q := range p.Projects[i].Quotas {
			names = append(names, q.Resource)
		}
	}
	// Requests name few distinct resources: dedupe with a scan of the
	// last ones seen rather than sorting every request.
	addName := func(r Resource) {
		for k := len(names) - 1; k >= 0 && k >= len(names)-16; k-- {
			if names[k] == r {
				return
			}
		}
		names = append(names, r)
	}
	for i := range s.Running {
		for _, ps := range s.Running[i].PodSets {
			addName(ps.Resource)
		}
	}
	for i := range s.Pending {
		for _, ps := range s.Pending[i].PodSets {
			addName(ps.Resource)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for _, r := range names {
		st.resource(r)
	}
	for _, n := range nodes {
		if _, dup := st.nodeIdx[n.Name]; dup {
			continue // first by name wins; names are unique in a real cluster
		}
		ni := int32(len(st.nodes))
		st.nodeIdx[n.Name] = ni
		ns := nodeState{name: n.Name}
		for _, t := range n.Taints {
			if t.Effect == NoSchedule || t.Effect == NoExecute {
				ns.taints = append(ns.taints, t)
			}
		}
		ok := n.Ready && !n.Unschedulable
		add := func(r Resource, alloc, inUse int) {
			ri := st.resource(r)
			c := 0
			if ok {
				c = max(0, alloc-inUse)
			}
			si := int32(len(st.slots))
			st.slots = append(st.slots, slot{node: ni, res: ri, free: c, cap: c})
			st.res[ri].slots = append(st.res[ri].slots, si)
			ns.slots = append(ns.slots, nodeSlot{res: ri, slot: si})
		}
		if n.GPUType != "" && n.GPUs > 0 {
			add(n.GPUType, n.GPUs, n.GPUsInUse)
		}
		mig := slices.Clone(n.MIG)
		slices.SortStableFunc(mig, func(a, b MIGSlices) int { return cmp.Compare(a.Profile, b.Profile) })
		for _, m := range mig {
			add(m.Profile, m.Allocatable, m.InUse)
		}
		st.nodes = append(st.nodes, ns)
	}
	R := len(st.res)

	// Projects and cohorts, sorted by name.
	pols := make([]*ProjectPolicy, len(p.Projects))
	for i := range p.Projects {
		pols[i] = &p.Projects[i]
	}
	slices.SortStableFunc(pols, func(a, b *ProjectPolicy) int { return cmp.Compare(a.Name, b.Name) })
	cohortIdx := map[string]int32{}
	var cohortNames []string
	for _, pp := range pols {
		cohortNames = append(cohortNames, cohortOf(pp))
	}
	slices.Sort(cohortNames)
	for _, c := range slices.Compact(cohortNames) {
		cohortIdx[c] = int32(len(st.cohorts))
		st.cohorts = append(st.cohorts, cohortState{name: c, poolCap: make([]int, R), poolUsed: make([]int, R),
			nominalTotal: make([]int, R), borrowed: make([]int, R), minOldBase: maxInt})
	}
	for _, pp := range pols {
		if _, dup := st.projIdx[pp.Name]; dup {
			continue
		}
		ps := projState{pol: pp, cohort: cohortIdx[cohortOf(pp)], weight: pp.Weight,
			nominal: make([]int, R), borrowLim: make([]int, R), lendable: make([]int, R), usage: make([]int, R), minOldBase: maxInt}
		if ps.weight <= 0 {
			ps.weight = 1
		}
		for _, q := range pp.Quotas {
			ri := st.resIdx[q.Resource]
			ps.nominal[ri] += max(0, q.Nominal)
			ps.borrowLim[ri] = int(q.BorrowingLimit)
			if q.BorrowingLimit < 0 {
				ps.borrowLim[ri] = -1
			}
			l := ps.nominal[ri]
			if q.LendingLimit >= 0 {
				l = min(l, int(q.LendingLimit))
			}
			ps.lendable[ri] = l
		}
		c := &st.cohorts[ps.cohort]
		for r := range R {
			c.poolCap[r] += ps.lendable[r]
			c.nominalTotal[r] += ps.nominal[r]
		}
		st.projIdx[pp.Name] = int32(len(st.projs))
		st.projs = append(st.projs, ps)
	}

	// Running workloads: node usage and quota usage.
	st.running = make([]runState, len(s.Running))
	for i := range s.Running {
		r := &s.Running[i]
		rs := runState{r: r, proj: -1, project: r.Project}
		if pi, ok := st.projIdx[r.Project]; ok {
			rs.proj = pi
			rs.base = basePriority(st.projs[pi].pol, &r.Workload)
		} else if r.Priority != nil {
			rs.base = *r.Priority
		}
		rs.old = !r.NoPreempt && (st.minRuntime < 0 || !s.Now.Before(r.Admitted.Add(st.minRuntime)))
		rs.needs = st.needsOf(&r.Workload, nil)
		for _, a := range r.Placement {
			if a.PodSet < 0 || a.PodSet >= len(r.PodSets) {
				continue
			}
			ps := &r.PodSets[a.PodSet]
			if si := st.slotOf(a.Node, ps.Resource); si >= 0 {
				sl := &st.slots[si]
				sl.free -= a.Pods * ps.Per // may go negative: overcommitted by others
			}
		}
		if rs.proj >= 0 {
			for _, n := range rs.needs {
				st.charge(rs.proj, n.res, n.units)
			}
			if rs.old {
				p := &st.projs[rs.proj]
				p.minOldBase = min(p.minOldBase, rs.base)
				c := &st.cohorts[p.cohort]
				c.minOldBase = min(c.minOldBase, rs.base)
			}
		}
		st.running[i] = rs
	}
	for ri := range st.res {
		rs := &st.res[ri]
		for _, si := range rs.slots {
			sl := &st.slots[si]
			sl.free = max(0, sl.free)
			rs.free += sl.free
			rs.maxFree = max(rs.maxFree, sl.free)
		}
	}

	// Pending workloads.
	dup := duplicateIDs(s)
	st.plan.Admissions = make([]Admission, 0, min(len(s.Pending), 1024))
	st.plan.Waits = make([]Wait, 0, len(s.Pending))
	st.items = make([]item, len(s.Pending))
	needBuf := make([]need, 0, 2*len(s.Pending))
	for i := range s.Pending {
		w := &s.Pending[i]
		it := &st.items[i]
		it.w, it.proj, it.submitNano = w, -1, w.Submitted.UnixNano()
		pi, ok := st.projIdx[w.Project]
		switch {
		case dup[i]:
			it.invalid = fmt.Errorf("%w: %q", ErrDuplicateID, w.ID)
		case !ok:
			it.invalid = fmt.Errorf("%w: %q", ErrUnknownProject, w.Project)
		default:
			it.invalid = validateGang(w)
		}
		if ok {
			it.proj = pi
			pp := st.projs[pi].pol
			it.base = basePriority(pp, w)
			if it.invalid == nil && (it.base < pp.MinPriority || it.base > pp.MaxPriority) {
				it.invalid = fmt.Errorf("%w: %d not in [%d, %d] for project %q", ErrPriorityOutOfRange, it.base, pp.MinPriority, pp.MaxPriority, pp.Name)
			}
		} else if w.Priority != nil {
			it.base = *w.Priority
		}
		it.eff = it.base + st.aging(w.Submitted)
		if it.invalid == nil {
			start := len(needBuf)
			needBuf = st.appendNeeds(needBuf, w)
			it.needs = needBuf[start:len(needBuf):len(needBuf)]
		}
	}
	// Queues per project (invalid workloads of unknown projects are
	// explained first, in ID order).
	var orphans []int32
	counts := make([]int32, len(st.projs))
	for i := range st.items {
		if pi := st.items[i].proj; pi >= 0 {
			counts[pi]++
		}
	}
	for pi := range st.projs {
		st.projs[pi].queue = make([]qkey, 0, counts[pi])
	}
	for i := range st.items {
		if st.items[i].proj < 0 {
			orphans = append(orphans, int32(i))
		} else {
			p := &st.projs[st.items[i].proj]
			p.queue = append(p.queue, qkey{eff: st.items[i].eff, submit: st.items[i].submitNano, idx: int32(i)})
		}
	}
	slices.SortFunc(orphans, st.cmpItems)
	for _, i := range orphans {
		st.decide(i)
	}
	for pi := range st.projs {
		p := &st.projs[pi]
		if len(p.queue) == 0 {
			continue
		}
		slices.SortFunc(p.queue, st.cmpKeys)
		p.share = st.shareOf(int32(pi))
		st.heap = append(st.heap, int32(pi))
	}
	return st
}

const maxInt = int(^uint(0) >> 1)

// duplicateIDs marks the pending workloads whose ID is used by another
// pending or running workload. It sorts 64-bit keys (an FNV-1a hash of the
// ID in the high bits, the workload's index in the low bits) and compares
// the IDs of equal hashes exactly: cheaper than a map of every ID, and
// the result does not depend on input order.
func duplicateIDs(s *Snapshot) []bool {
	n := len(s.Pending) + len(s.Running)
	shift := bits.Len(uint(n))
	id := func(k int) string {
		if k < len(s.Pending) {
			return s.Pending[k].ID
		}
		return s.Running[k-len(s.Pending)].ID
	}
	keys := make([]uint64, n)
	for k := range n {
		h := uint64(14695981039346656037)
		x := id(k)
		for j := 0; j < len(x); j++ {
			h = (h ^ uint64(x[j])) * 1099511628211
		}
		keys[k] = h<<shift | uint64(k)
	}
	slices.Sort(keys)
	dup := make([]bool, len(s.Pending))
	mask := uint64(1)<<shift - 1
	for lo := 0; lo < n; {
		hi := lo + 1
		for hi < n && keys[hi]>>shift == keys[lo]>>shift {
			hi++
		}
		for a := lo; a < hi; a++ {
			ka := int(keys[a] & mask)
			if ka >= len(s.Pending) {
				continue
			}
			for b := lo; b < hi; b++ {
				if b != a && id(int(keys[b]&mask)) == id(ka) {
					dup[ka] = true
				}
			}
		}
		lo = hi
	}
	return dup
}

func cohortOf(p *ProjectPolicy) string {
	if p.Cohort == "" {
		return DefaultCohort
	}
	return p.Cohort
}

func basePriority(p *ProjectPolicy, w *Workload) int {
	if w.Priority != nil {
		return *w.Priority
	}
	return p.DefaultPriority
}

func validateGang(w *Workload) error {
	total := 0
	for _, ps := range w.PodSets {
		if ps.Count < 0 || ps.Per < 0 || ps.Resource == "" && ps.Count*ps.Per > 0 {
			return fmt.Errorf("%w: pod set %q of %q is malformed", ErrEmptyGang, ps.Name, w.ID)
		}
		total += ps.Count * ps.Per
	}
	if total == 0 {
		return fmt.Errorf("%w: %q", ErrEmptyGang, w.ID)
	}
	return nil
}

// aging is the priority bonus of a workload submitted at t.
func (st *state) aging(t time.Time) int {
	if st.agingCap < 0 || !st.now.After(t) {
		return 0
	}
	return int(min(int64(st.agingCap), int64(st.now.Sub(t)/st.agingStep)))
}

func (st *state) slotOf(node string, r Resource) int32 {
	ni, ok := st.nodeIdx[node]
	if !ok {
		return -1
	}
	ri := st.find(r)
	if ri < 0 {
		return -1
	}
	for _, ns := range st.nodes[ni].slots {
		if ns.res == ri {
			return ns.slot
		}
	}
	return -1
}

// appendNeeds appends w's per-resource totals, sorted by resource index.
func (st *state) appendNeeds(buf []need, w *Workload) []need {
	start := len(buf)
	for _, ps := range w.PodSets {
		u := ps.Count * ps.Per
		if u <= 0 {
			continue
		}
		ri := st.resource(ps.Resource)
		found := false
		for j := start; j < len(buf); j++ {
			if buf[j].res == ri {
				buf[j].units += u
				found = true
			}
		}
		if !found {
			buf = append(buf, need{res: ri, units: u})
		}
	}
	if len(buf)-start > 1 {
		slices.SortFunc(buf[start:], func(a, b need) int { return cmp.Compare(a.res, b.res) })
	}
	return buf
}

func (st *state) needsOf(w *Workload, buf []need) []need { return st.appendNeeds(buf, w) }

// qkey is a queue entry with its sort key inline and no pointers (cheap
// to swap while sorting); the ID breaks exact ties through items.
type qkey struct {
	eff    int
	submit int64
	idx    int32
}

func (st *state) cmpKeys(x, y qkey) int {
	if x.eff != y.eff {
		return cmp.Compare(y.eff, x.eff)
	}
	if x.submit != y.submit {
		return cmp.Compare(x.submit, y.submit)
	}
	return cmp.Compare(st.items[x.idx].w.ID, st.items[y.idx].w.ID)
}

// cmpItems orders a project's queue: effective priority (desc), submit
// time, ID.
func (st *state) cmpItems(a, b int32) int {
	x, y := &st.items[a], &st.items[b]
	if c := cmp.Compare(y.eff, x.eff); c != 0 {
		return c
	}
	if c := cmp.Compare(x.submitNano, y.submitNano); c != 0 {
		return c
	}
	return cmp.Compare(x.w.ID, y.w.ID)
}

// resizing quota arrays for resources first seen in pending requests.
func (st *state) grow() {
	R := len(st.res)
	for pi := range st.projs {
		p := &st.projs[pi]
		for len(p.nominal) < R {
			p.nominal = append(p.nominal, 0)
			p.borrowLim = append(p.borrowLim, 0)
			p.lendable = append(p.lendable, 0)
			p.usage = append(p.usage, 0)
		}
	}
	for ci := range st.cohorts {
		c := &st.cohorts[ci]
		for len(c.poolCap) < R {
			c.poolCap = append(c.poolCap, 0)
			c.poolUsed = append(c.poolUsed, 0)
			c.borrowed = append(c.borrowed, 0)
			c.nominalTotal = append(c.nominalTotal, 0)
		}
	}
}

// guaranteed is the part of the nominal quota that is never lent.
func (p *projState) guaranteed(r int32) int { return p.nominal[r] - p.lendable[r] }

// charge adds units of r to a project's usage and its cohort's pool.
func (st *state) charge(pi, r int32, units int) {
	if int(r) >= len(st.projs[pi].usage) {
		st.grow()
	}
	p := &st.projs[pi]
	c := &st.cohorts[p.cohort]
	g := p.guaranteed(r)
	c.poolUsed[r] += max(0, p.usage[r]+units-g) - max(0, p.usage[r]-g)
	c.borrowed[r] += max(0, p.usage[r]+units-p.nominal[r]) - max(0, p.usage[r]-p.nominal[r])
	p.usage[r] += units
}

// headroom is how many more units of r the project may use now.
func (st *state) headroom(pi, r int32) int {
	p := &st.projs[pi]
	if int(r) >= len(p.usage) {
		st.grow()
	}
	c := &st.cohorts[p.cohort]
	h := max(0, p.guaranteed(r)-p.usage[r]) + c.poolCap[r] - c.poolUsed[r]
	if p.borrowLim[r] >= 0 {
		h = min(h, p.nominal[r]+p.borrowLim[r]-p.usage[r])
	}
	return max(0, h)
}

// quotaFails returns the first need that exceeds the project's headroom.
func (st *state) quotaFails(it *item) (need, bool) {
	for _, n := range it.needs {
		if n.units > st.headroom(it.proj, n.res) {
			return n, true
		}
	}
	return need{}, false
}

// shareOf is the project's weighted dominant share: the largest usage /
// nominal over resources (usage / the cohort's total nominal for a
// resource with no nominal of its own), divided by the weight.
func (st *state) shareOf(pi int32) float64 {
	p := &st.projs[pi]
	c := &st.cohorts[p.cohort]
	s := 0.0
	for r, u := range p.usage {
		if u <= 0 {
			continue
		}
		base := p.nominal[r]
		if base <= 0 {
			base = c.nominalTotal[r]
		}
		if base <= 0 {
			base = 1
		}
		s = max(s, float64(u)/float64(base))
	}
	return s / p.weight
}

// --- the decision loop ---

func (st *state) less(a, b int32) bool {
	pa, pb := &st.projs[a], &st.projs[b]
	if pa.share != pb.share {
		return pa.share < pb.share
	}
	if c := st.cmpKeys(pa.queue[pa.head], pb.queue[pb.head]); c != 0 {
		return c < 0
	}
	return pa.pol.Name < pb.pol.Name
}

func (st *state) run() {
	h := st.heap
	for i := len(h)/2 - 1; i >= 0; i-- {
		st.down(i)
	}
	for len(st.heap) > 0 {
		pi := st.heap[0]
		p := &st.projs[pi]
		i := p.queue[p.head].idx
		p.head++
		st.decide(i)
		p.share = st.shareOf(pi) // admissions and preemption holds change usage
		if p.head < len(p.queue) {
			st.down(0)
		} else {
			last := len(st.heap) - 1
			st.heap[0] = st.heap[last]
			st.heap = st.heap[:last]
			if last > 0 {
				st.down(0)
			}
		}
	}
}

func (st *state) down(i int) {
	h := st.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && st.less(h[r], h[l]) {
			m = r
		}
		if !st.less(h[m], h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// decide admits item i or explains why it waits; it reports admission.
func (st *state) decide(i int32) bool {
	it := &st.items[i]
	pos := len(st.plan.Admissions) + len(st.plan.Waits) + 1
	// The Wait is built in place (Waits has capacity for every pending
	// workload, so the pointer stays valid) and dropped on admission.
	// Reslicing into the zeroed capacity and setting three fields costs
	// far less than appending a composite literal.
	st.plan.Waits = st.plan.Waits[:len(st.plan.Waits)+1]
	wait := &st.plan.Waits[len(st.plan.Waits)-1]
	wait.Workload, wait.Position, wait.Priority = it.w.ID, pos, it.eff
	if it.invalid != nil {
		wait.Reason, wait.Err, wait.Detail = WaitInvalid, it.invalid, it.invalid.Error()
		return false
	}
	if n, bad := st.quotaFails(it); bad {
		st.explainQuota(wait, it, n)
		st.tryPreempt(i, wait)
		return false
	}
	// O(1) per resource: enough free units in the pool?
	for _, n := range it.needs {
		rs := &st.res[n.res]
		if rs.free < n.units {
			st.blocked(i, wait, n)
			return false
		}
	}
	if st.place(it, false) {
		*wait = Wait{} // the slot is reused by the next decision
		st.plan.Waits = st.plan.Waits[:len(st.plan.Waits)-1]
		st.admit(i, pos)
		return true
	}
	st.blocked(i, wait, need{res: -1})
	return false
}

func (st *state) explainQuota(w *Wait, it *item, n need) {
	p := &st.projs[it.proj]
	c := &st.cohorts[p.cohort]
	w.Reason, w.Resource, w.Needed = WaitQuota, st.res[n.res].name, n.units
	if len(st.quotaSlab) == cap(st.quotaSlab) {
		// Allocated in chunks: Waits point into them, so never regrown.
		st.quotaSlab = make([]QuotaShortfall, 0, 512)
	}
	st.quotaSlab = append(st.quotaSlab, QuotaShortfall{
		Project: p.pol.Name, Cohort: c.name, Used: p.usage[n.res], Nominal: p.nominal[n.res],
		Borrowable:     max(0, st.headroom(it.proj, n.res)-max(0, p.nominal[n.res]-p.usage[n.res])),
		BorrowingLimit: Limit(p.borrowLim[n.res]), CohortLendable: max(0, c.poolCap[n.res]-c.poolUsed[n.res]),
	})
	w.Quota = &st.quotaSlab[len(st.quotaSlab)-1]
}

// blocked handles a workload within quota that does not fit free
// capacity: preemption, else a reservation or an explanation. n is the
// resource short in the pool, or res -1 when placement failed.
func (st *state) blocked(i int32, wait *Wait, n need) {
	it := &st.items[i]
	if n.res < 0 {
		n = st.placementShort(it)
	}
	rs := &st.res[n.res]
	wait.Resource, wait.Needed, wait.Free = rs.name, n.units, rs.free
	// Would it fit without other workloads' reservations?
	if rs.reserved > 0 && st.freeWithReserved(it) && st.place(it, true) {
		st.undo()
		wait.Reason, wait.BlockedBy = WaitReservation, rs.holderID
		wait.Free = rs.free + rs.reserved
		return
	}
	if rs.free < n.units {
		wait.Reason = WaitCapacity
	} else {
		wait.Reason = WaitNoNodeFits
	}
	if st.tryPreempt(i, wait) {
		return
	}
	// A reservation for the highest-ranked blocked workload of each
	// resource.
	free := true
	for _, n := range it.needs {
		if st.res[n.res].holder >= 0 {
			free = false
		}
	}
	if free {
		if short, offered, ok := st.reserve(i, ReserveBlocked); !ok {
			wait.Reason, wait.Resource, wait.Needed = WaitNeverFits, st.res[short.res].name, short.units
			wait.Offered = offered
		} else {
			wait.HoldsReservation = true
		}
	}
}

// placementShort picks the resource to blame for a failed placement: the
// first one whose pod sets do not fit alone.
func (st *state) placementShort(it *item) need {
	for _, n := range it.needs {
		ok := true
		for k := range it.w.PodSets {
			ps := &it.w.PodSets[k]
			if ps.Count*ps.Per > 0 && st.find(ps.Resource) == n.res && !st.placeSet(k, ps, n.res, false) {
				ok = false
			}
		}
		st.undo()
		if !ok {
			return n
		}
	}
	return it.needs[0]
}

func (st *state) freeWithReserved(it *item) bool {
	for _, n := range it.needs {
		rs := &st.res[n.res]
		if rs.free+rs.reserved < n.units {
			return false
		}
	}
	return true
}

func (st *state) tolerated(ni int32, ps *PodSet) bool {
	for _, t := range st.nodes[ni].taints {
		ok := false
		for _, tol := range ps.Tolerations {
			if tol.tolerates(t) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// place tentatively assigns every pod set first-fit in node-name order
// (as many pods per node as fit). On success the assignment stays in
// st.scratch and in the slots (admit or undo it); on failure it is undone.
func (st *state) place(it *item, useReserved bool) bool {
	st.scratch = st.scratch[:0]
	for k := range it.w.PodSets {
		ps := &it.w.PodSets[k]
		if ps.Count*ps.Per <= 0 {
			continue
		}
		if !st.placeSet(k, ps, st.find(ps.Resource), useReserved) {
			st.undo()
			return false
		}
	}
	return true
}

func (st *state) placeSet(k int, ps *PodSet, ri int32, useReserved bool) bool {
	rs := &st.res[ri]
	if !useReserved && ps.Per > rs.maxFree {
		return false
	}
	first := true
	for _, p := range st.scratch {
		if p.res == ri {
			first = false
			break
		}
	}
	// Free units only shrink during a cycle (outside a victim search), so
	// a shape that failed once fails again: reject it in O(1).
	mode := 0
	if useReserved {
		mode = 1
	}
	memo := first && len(ps.Tolerations) == 0
	if memo && !st.searching {
		for _, f := range rs.failed[mode] {
			if ps.Per >= f.per && ps.Count >= f.count {
				return false
			}
		}
	}
	left, seen := ps.Count, 0
	for _, si := range rs.slots {
		sl := &st.slots[si]
		avail := sl.free
		if useReserved {
			avail += sl.reserved
		}
		seen = max(seen, sl.free)
		if avail < ps.Per || !st.tolerated(sl.node, ps) {
			continue
		}
		k2 := min(left, avail/ps.Per)
		st.take(sl, k2*ps.Per, useReserved)
		st.scratch = append(st.scratch, placed{podSet: k, res: ri, slot: si, pods: k2, units: k2 * ps.Per})
		left -= k2
		if left == 0 {
			return true
		}
	}
	if first && !useReserved {
		rs.maxFree = min(rs.maxFree, seen) // exact after a full scan
	}
	if memo && len(rs.failed[mode]) < 16 {
		rs.failed[mode] = append(rs.failed[mode], shape{ps.Per, ps.Count})
	}
	return false
}

// shape is a pod set's size, for the memo of failed placements.
type shape struct{ per, count int }

func (st *state) take(sl *slot, units int, useReserved bool) {
	from := min(units, sl.free)
	sl.free -= from
	if useReserved {
		sl.reserved -= units - from
		sl.tmp += units - from // remember what came from reservations
	}
}

func (st *state) undo() {
	for _, p := range st.scratch {
		sl := &st.slots[p.slot]
		fromRes := min(sl.tmp, p.units)
		sl.tmp -= fromRes
		sl.reserved += fromRes
		sl.free += p.units - fromRes
	}
	st.scratch = st.scratch[:0]
}

// admit commits st.scratch as item i's admission.
func (st *state) admit(i int32, pos int) {
	it := &st.items[i]
	p := &st.projs[it.proj]
	a := Admission{Workload: it.w.ID, Position: pos, Priority: it.eff, Placement: make([]Assignment, 0, len(st.scratch))}
	for _, pl := range st.scratch {
		if pl.pods == 0 {
			continue
		}
		a.Placement = append(a.Placement, Assignment{PodSet: pl.podSet, Node: st.nodes[st.slots[pl.slot].node].name, Pods: pl.pods})
		st.res[pl.res].free -= pl.units
	}
	for _, n := range it.needs {
		over := max(0, p.usage[n.res]+n.units-p.nominal[n.res]) - max(0, p.usage[n.res]-p.nominal[n.res])
		if over > 0 {
			a.Borrowed = append(a.Borrowed, Amount{Resource: st.res[n.res].name, Units: over})
		}
		st.charge(it.proj, n.res, n.units)
	}
	slices.SortFunc(a.Borrowed, func(x, y Amount) int { return cmp.Compare(x.Resource, y.Resource) })
	st.scratch = st.scratch[:0]
	st.plan.Admissions = append(st.plan.Admissions, a)
}

// reserve holds, for item i, the free part of the nodes it would use if
// every Atelier workload ended (most free first). It fails, naming the
// short resource and what the pool offers, when even that does not fit.
func (st *state) reserve(i int32, kind ReservationKind) (need, int, bool) {
	it := &st.items[i]
	type target struct {
		slot  int32
		units int
	}
	var targets []target
	defer func() {
		for _, t := range targets {
			st.slots[t.slot].tmp = 0
		}
	}()
	for k := range it.w.PodSets {
		ps := &it.w.PodSets[k]
		if ps.Count*ps.Per <= 0 {
			continue
		}
		ri := st.find(ps.Resource)
		order := slices.Clone(st.res[ri].slots)
		slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(st.slots[b].free, st.slots[a].free) })
		left := ps.Count
		for _, si := range order {
			sl := &st.slots[si]
			if sl.cap-sl.tmp < ps.Per || !st.tolerated(sl.node, ps) {
				continue
			}
			k2 := min(left, (sl.cap-sl.tmp)/ps.Per)
			sl.tmp += k2 * ps.Per
			targets = append(targets, target{si, k2 * ps.Per})
			left -= k2
			if left == 0 {
				break
			}
		}
		if left > 0 {
			offered := 0
			for _, si := range st.res[ri].slots {
				if st.tolerated(st.slots[si].node, ps) {
					offered += st.slots[si].cap
				}
			}
			for _, n := range it.needs {
				if n.res == ri {
					return n, offered, false
				}
			}
		}
	}
	st.holdTargets(i, kind, func(yield func(int32, int)) {
		for _, t := range targets {
			yield(t.slot, t.units)
		}
	})
	return need{}, 0, true
}

// holdTargets moves min(units, free) of each slot into its reservation
// and records the Reservation.
func (st *state) holdTargets(i int32, kind ReservationKind, each func(func(int32, int))) {
	it := &st.items[i]
	type held struct {
		slot  int32
		units int
	}
	var hs []held
	each(func(si int32, units int) {
		sl := &st.slots[si]
		h := min(units, sl.free)
		if h <= 0 {
			return
		}
		sl.free -= h
		sl.reserved += h
		rs := &st.res[sl.res]
		rs.free -= h
		rs.reserved += h
		hs = append(hs, held{si, h})
	})
	for _, n := range it.needs {
		if rs := &st.res[n.res]; rs.holder < 0 {
			rs.holder, rs.holderID = i, it.w.ID
		}
	}
	slices.SortStableFunc(hs, func(a, b held) int { return cmp.Compare(a.slot, b.slot) })
	res := Reservation{Workload: it.w.ID, Kind: kind}
	for _, h := range hs {
		sl := &st.slots[h.slot]
		if k := len(res.Nodes) - 1; k >= 0 && res.Nodes[k].Node == st.nodes[sl.node].name && res.Nodes[k].Resource == st.res[sl.res].name {
			res.Nodes[k].Units += h.units
			continue
		}
		res.Nodes = append(res.Nodes, NodeAmount{Node: st.nodes[sl.node].name, Resource: st.res[sl.res].name, Units: h.units})
	}
	slices.SortStableFunc(res.Nodes, func(a, b NodeAmount) int {
		if c := cmp.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		return cmp.Compare(a.Resource, b.Resource)
	})
	st.plan.Reservations = append(st.plan.Reservations, res)
}
