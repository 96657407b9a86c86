package gpu

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestSchedule(t *testing.T) {
	twoA100 := Inventory{Nodes: []Node{gpuNode("n1", a100, 8), gpuNode("n2", a100, 8)}}
	open := Policy{Projects: []ProjectPolicy{
		project("a", quota(a100, 16, 0, 0)),
		project("b", quota(a100, 16, 0, 0)),
	}}
	tests := []struct {
		name string
		msgs map[string]string // Wait.Message() by workload
		snap Snapshot
		want Plan
	}{{
		name: "admits every fitting gang in one cycle, first fit by node name",
		snap: Snapshot{Now: at(0), Inventory: twoA100, Policy: open, Pending: []Workload{
			wl("w1", "a", at(-3), 1, 4, a100),
			wl("w2", "a", at(-2), 3, 2, a100),
			wl("w3", "b", at(-1), 1, 6, a100),
		}},
		want: Plan{Admissions: []Admission{
			// a and b start at share 0: ties by priority, then submit time.
			{Workload: "w1", Position: 1, Placement: []Assignment{{0, "n1", 1}}},
			// b (0) now has a lower share than a (4/16).
			{Workload: "w3", Position: 2, Placement: []Assignment{{0, "n2", 1}}},
			{Workload: "w2", Position: 3, Placement: []Assignment{{0, "n1", 2}, {0, "n2", 1}}},
		}},
	}, {
		name: "quota: explains usage, nominal and what may be borrowed",
		msgs: map[string]string{
			"w1": `quota: project "a" needs 4 NVIDIA-A100-SXM4-80GB but may use only 1 more: it uses 4 of its nominal 4, borrowing limit 2, cohort "default" has 1 unused lendable`,
		},
		snap: Snapshot{Now: at(0), Inventory: twoA100,
			Policy: Policy{Projects: []ProjectPolicy{
				project("a", quota(a100, 4, 2, 0)),
				project("b", quota(a100, 2, 0, 1)),
			}},
			Running: []Running{running(wl("r1", "a", at(-60), 1, 4, a100), at(-50), "n1", 1)},
			Pending: []Workload{wl("w1", "a", at(-1), 1, 4, a100)},
		},
		want: Plan{Waits: []Wait{{
			Workload: "w1", Position: 1, Reason: WaitQuota, Resource: a100, Needed: 4,
			Quota: &QuotaShortfall{Project: "a", Cohort: "default", Used: 4, Nominal: 4, Borrowable: 1, BorrowingLimit: 2, CohortLendable: 1},
		}}},
	}, {
		name: "capacity: needed vs free; the highest-ranked blocked gang holds a reservation",
		msgs: map[string]string{
			"big":    "capacity: needs 8 NVIDIA-A100-SXM4-80GB, 4 free in the pool" + holdsSuffix,
			"small2": `reservation: needs 2 NVIDIA-A100-SXM4-80GB; 2 are free but held for higher-ranked workload "big", which is waiting for capacity`,
		},
		snap: Snapshot{Now: at(0), Inventory: twoA100, Policy: open,
			Running: []Running{running(wl("r1", "b", at(-60), 2, 6, a100), at(-50), "n1", 1, "n2", 1)},
			Pending: []Workload{wl("big", "a", at(-5), 1, 8, a100), wl("small", "a", at(-1), 1, 2, a100), wl("small2", "a", at(0), 1, 2, a100)},
		},
		want: Plan{
			Admissions: []Admission{{Workload: "small", Position: 2, Placement: []Assignment{{0, "n2", 1}}}},
			Reservations: []Reservation{{Workload: "big", Kind: ReserveBlocked,
				Nodes: []NodeAmount{{Node: "n1", Resource: a100, Units: 2}}}},
			Waits: []Wait{{
				Workload: "big", Position: 1, Reason: WaitCapacity, Resource: a100, Needed: 8, Free: 4, HoldsReservation: true,
			}, {
				Workload: "small2", Position: 3, Reason: WaitReservation, Resource: a100, Needed: 2, Free: 2, BlockedBy: "big",
			}},
		},
	}, {
		name: "no node fits: enough free in total, fragmented",
		msgs: map[string]string{
			"w1": "placement: needs 8 NVIDIA-A100-SXM4-80GB and 8 are free, but no set of nodes fits the gang's pods (free units per node, taints, readiness)" + holdsSuffix,
		},
		snap: Snapshot{Now: at(0), Inventory: twoA100, Policy: open,
			Running: []Running{running(wl("r1", "b", at(-60), 2, 4, a100), at(-50), "n1", 1, "n2", 1)},
			Pending: []Workload{wl("w1", "a", at(-5), 1, 8, a100)},
		},
		want: Plan{
			Reservations: []Reservation{{Workload: "w1", Kind: ReserveBlocked, Nodes: []NodeAmount{{Node: "n1", Resource: a100, Units: 4}}}},
			Waits: []Wait{{
				Workload: "w1", Position: 1, Reason: WaitNoNodeFits, Resource: a100, Needed: 8, Free: 8, HoldsReservation: true,
			}},
		},
	}, {
		name: "never fits: pods larger than any node; no reservation",
		msgs: map[string]string{
			"w1": "placement: the gang can never fit: needs 16 NVIDIA-A100-SXM4-80GB in pods that no set of ready, tolerated nodes can hold even with no Atelier workload running (they offer 16 in total)",
		},
		snap: Snapshot{Now: at(0), Inventory: twoA100, Policy: open,
			Pending: []Workload{wl("w1", "a", at(-5), 1, 16, a100)},
		},
		want: Plan{Waits: []Wait{{
			Workload: "w1", Position: 1, Reason: WaitNeverFits, Resource: a100, Needed: 16, Free: 16, Offered: 16,
		}}},
	}, {
		name: "taints: only tolerating pods land on a tainted node",
		msgs: map[string]string{
			"plain": "placement: the gang can never fit: needs 1 NVIDIA-A100-SXM4-80GB in pods that no set of ready, tolerated nodes can hold even with no Atelier workload running (they offer 0 in total)",
		},
		snap: Snapshot{Now: at(0), Policy: open,
			Inventory: Inventory{Nodes: []Node{{Name: "t1", GPUType: a100, GPUs: 8, Ready: true,
				Taints: []Taint{{Key: "gpu", Value: "reserved", Effect: NoSchedule}}}}},
			Pending: []Workload{
				wl("plain", "a", at(-5), 1, 1, a100),
				{ID: "tol", Project: "a", Submitted: at(-1), PodSets: []PodSet{{Count: 1, Per: 1, Resource: a100,
					Tolerations: []Toleration{{Key: "gpu", Operator: "Exists"}}}}},
			},
		},
		want: Plan{
			Admissions: []Admission{{Workload: "tol", Position: 2, Placement: []Assignment{{0, "t1", 1}}}},
			Waits: []Wait{{
				Workload: "plain", Position: 1, Reason: WaitNeverFits, Resource: a100, Needed: 1, Free: 8,
			}},
		},
	}, {
		name: "MIG slices are a resource of their own",
		msgs: map[string]string{
			"m2": "capacity: needs 1 nvidia.com/mig-1g.10gb, 0 free in the pool" + holdsSuffix,
		},
		snap: Snapshot{Now: at(0),
			Inventory: Inventory{Nodes: []Node{{Name: "m1", GPUType: a100, GPUs: 1, Ready: true,
				MIG: []MIGSlices{{Profile: mig1, Allocatable: 7, InUse: 2}}}}},
			Policy:  Policy{Projects: []ProjectPolicy{project("a", quota(mig1, 7, 0, 0))}},
			Pending: []Workload{wl("m", "a", at(-1), 5, 1, mig1), wl("m2", "a", at(0), 1, 1, mig1)},
		},
		want: Plan{
			Admissions:   []Admission{{Workload: "m", Position: 1, Placement: []Assignment{{0, "m1", 5}}}},
			Waits:        []Wait{{Workload: "m2", Position: 2, Reason: WaitCapacity, Resource: mig1, Needed: 1, Free: 0, HoldsReservation: true}},
			Reservations: []Reservation{{Workload: "m2", Kind: ReserveBlocked}},
		},
	}, {
		name: "borrowing is recorded on the admission",
		snap: Snapshot{Now: at(0), Inventory: twoA100,
			Policy: Policy{Projects: []ProjectPolicy{
				project("a", quota(a100, 4, Unlimited, 0)),
				project("b", quota(a100, 8, 0, Unlimited)),
			}},
			Pending: []Workload{wl("w1", "a", at(-1), 1, 6, a100)},
		},
		want: Plan{Admissions: []Admission{{Workload: "w1", Position: 1, Placement: []Assignment{{0, "n1", 1}},
			Borrowed: []Amount{{Resource: a100, Units: 2}}}}},
	}, {
		name: "reclaim: a project under its nominal preempts a borrower, fewest victims, most recent first",
		msgs: map[string]string{
			"w1": "preemption: waiting for 1 preempted workload(s) to end: b3",
		},
		snap: Snapshot{Now: at(0), Inventory: twoA100,
			Policy: Policy{Projects: []ProjectPolicy{
				project("a", quota(a100, 8, 0, Unlimited)),
				project("b", quota(a100, 8, Unlimited, Unlimited)),
			}},
			Running: []Running{
				running(wl("b1", "b", at(-90), 1, 8, a100), at(-80), "n1", 1),
				running(wl("b2", "b", at(-90), 1, 4, a100), at(-60), "n2", 1),
				running(wl("b3", "b", at(-90), 1, 4, a100), at(-30), "n2", 1),
			},
			Pending: []Workload{wl("w1", "a", at(-1), 1, 4, a100)},
		},
		want: Plan{
			Preemptions:  []Preemption{{Victim: "b3", Reason: ReclaimQuota, For: "w1"}},
			Reservations: []Reservation{{Workload: "w1", Kind: ReservePreempting}},
			Waits: []Wait{{Workload: "w1", Position: 1, Reason: WaitPreemption, Resource: a100, Needed: 4,
				Quota:            &QuotaShortfall{Project: "a", Cohort: "default", Nominal: 8},
				HoldsReservation: true, Victims: []string{"b3"}}},
		},
	}, {
		name: "priority: strictly lower base priority in the same project; the minimum-runtime guard protects young workloads",
		msgs: map[string]string{
			"hi": "preemption: waiting for 1 preempted workload(s) to end: low-old",
		},
		snap: Snapshot{Now: at(0), Inventory: Inventory{Nodes: []Node{gpuNode("n1", a100, 8)}}, Policy: open,
			Running: []Running{
				running(withPrio(wl("low-old", "a", at(-90), 1, 4, a100), 1), at(-60), "n1", 1),
				running(withPrio(wl("low-young", "a", at(-90), 1, 4, a100), 1), at(-2), "n1", 1),
			},
			Pending: []Workload{withPrio(wl("hi", "a", at(-1), 1, 4, a100), 5)},
		},
		want: Plan{
			Preemptions:  []Preemption{{Victim: "low-old", Reason: Priority, For: "hi"}},
			Reservations: []Reservation{{Workload: "hi", Kind: ReservePreempting}},
			Waits: []Wait{{Workload: "hi", Position: 1, Priority: 5, Reason: WaitPreemption, Resource: a100, Needed: 4,
				HoldsReservation: true, Victims: []string{"low-old"}}},
		},
	}, {
		name: "NoPreempt: a run's shared RayCluster is never a victim; the preemptor waits for capacity instead",
		msgs: map[string]string{"hi": "capacity: needs 4 NVIDIA-A100-SXM4-80GB, 0 free in the pool" + holdsSuffix},
		snap: Snapshot{Now: at(0), Inventory: Inventory{Nodes: []Node{gpuNode("n1", a100, 4)}}, Policy: open,
			Running: []Running{func() Running {
				r := running(withPrio(wl("shared", "a", at(-90), 1, 4, a100), 1), at(-60), "n1", 1)
				r.NoPreempt = true
				return r
			}()},
			Pending: []Workload{withPrio(wl("hi", "a", at(-1), 1, 4, a100), 5)},
		},
		want: Plan{
			Reservations: []Reservation{{Workload: "hi", Kind: ReserveBlocked}},
			Waits: []Wait{{Workload: "hi", Position: 1, Priority: 5, Reason: WaitCapacity, Resource: a100, Needed: 4,
				HoldsReservation: true}},
		},
	}, {
		name: "aging: an old low-priority workload passes a young higher one, capped",
		msgs: map[string]string{
			"old":   "capacity: needs 4 NVIDIA-A100-SXM4-80GB, 0 free in the pool" + holdsSuffix,
			"young": "capacity: needs 4 NVIDIA-A100-SXM4-80GB, 0 free in the pool",
		},
		snap: Snapshot{Now: at(0), Inventory: Inventory{Nodes: []Node{gpuNode("n1", a100, 4)}}, Policy: open,
			Pending: []Workload{
				withPrio(wl("old", "a", at(-35), 1, 4, a100), 1),      // 1 + 35m/10m = 4
				withPrio(wl("young", "a", at(-1), 1, 4, a100), 3),     // 3
				withPrio(wl("ancient", "a", at(-999), 1, 4, a100), 0), // 0 + cap 10... ranks first
			},
		},
		want: Plan{
			Admissions:   []Admission{{Workload: "ancient", Position: 1, Priority: 10, Placement: []Assignment{{0, "n1", 1}}}},
			Reservations: []Reservation{{Workload: "old", Kind: ReserveBlocked}},
			Waits: []Wait{
				{Workload: "old", Position: 2, Priority: 4, Reason: WaitCapacity, Resource: a100, Needed: 4, HoldsReservation: true},
				{Workload: "young", Position: 3, Priority: 3, Reason: WaitCapacity, Resource: a100, Needed: 4},
			},
		},
	}, {
		name: "invalid workloads are explained with sentinel errors",
		msgs: map[string]string{
			"nobody":   `invalid: gpu: unknown project: "ghost"`,
			"too-high": `invalid: gpu: priority outside the project's allowed range: 1000 not in [0, 100] for project "a"`,
			"dup-run":  `invalid: gpu: duplicate workload ID: "dup-run"`,
			"empty":    `invalid: gpu: workload requests no GPUs: "empty"`,
		},
		snap: Snapshot{Now: at(0), Inventory: twoA100, Policy: open,
			Running: []Running{running(wl("dup-run", "a", at(-9), 1, 1, a100), at(-8), "n1", 1)},
			Pending: []Workload{
				wl("nobody", "ghost", at(-1), 1, 1, a100),
				withPrio(wl("too-high", "a", at(-1), 1, 1, a100), 1000),
				wl("empty", "a", at(-1), 0, 1, a100),
				wl("dup-run", "a", at(-1), 1, 1, a100),
			},
		},
		want: Plan{Waits: []Wait{
			{Workload: "nobody", Position: 1, Reason: WaitInvalid, Err: ErrUnknownProject, Detail: `gpu: unknown project: "ghost"`},
			{Workload: "too-high", Position: 2, Priority: 1000, Reason: WaitInvalid, Err: ErrPriorityOutOfRange,
				Detail: `gpu: priority outside the project's allowed range: 1000 not in [0, 100] for project "a"`},
			{Workload: "dup-run", Position: 3, Reason: WaitInvalid, Err: ErrDuplicateID, Detail: `gpu: duplicate workload ID: "dup-run"`},
			{Workload: "empty", Position: 4, Reason: WaitInvalid, Err: ErrEmptyGang, Detail: `gpu: workload requests no GPUs: "empty"`},
		}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Schedule(tc.snap)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty(), cmpopts.EquateErrors()); diff != "" {
				t.Errorf("Schedule() mismatch (-want +got):\n%s", diff)
			}
			msgs := map[string]string{}
			for _, w := range got.Waits {
				msgs[w.Workload] = w.Message()
			}
			if diff := cmp.Diff(tc.msgs, msgs, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Wait.Message() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEffectivePriorityAging(t *testing.T) {
	st := &state{now: at(0), agingStep: 10 * time.Minute, agingCap: 3}
	for _, tc := range []struct {
		waited time.Duration
		want   int
	}{{0, 0}, {9 * time.Minute, 0}, {10 * time.Minute, 1}, {25 * time.Minute, 2}, {10 * time.Hour, 3}, {-time.Hour, 0}} {
		if got := st.aging(at(0).Add(-tc.waited)); got != tc.want {
			t.Errorf("aging after %v = %d, want %d", tc.waited, got, tc.want)
		}
	}
}

func TestValidateWorkload(t *testing.T) {
	pol := Policy{Projects: []ProjectPolicy{project("a", quota(a100, 8, 0, 0))}}
	for _, tc := range []struct {
		name string
		w    Workload
		want error
	}{
		{"ok", wl("w", "a", at(0), 1, 1, a100), nil},
		{"unknown project", wl("w", "ghost", at(0), 1, 1, a100), ErrUnknownProject},
		{"empty gang", wl("w", "a", at(0), 0, 1, a100), ErrEmptyGang},
		{"negative count", wl("w", "a", at(0), -1, 1, a100), ErrEmptyGang},
		{"priority above range", withPrio(wl("w", "a", at(0), 1, 1, a100), 101), ErrPriorityOutOfRange},
		{"priority below range", withPrio(wl("w", "a", at(0), 1, 1, a100), -1), ErrPriorityOutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateWorkload(pol, tc.w)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("ValidateWorkload() = %v, want %v", err, tc.want)
			}
		})
	}
}
