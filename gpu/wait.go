package gpu

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors for a workload that can never be scheduled as submitted.
// A Wait with reason WaitInvalid carries one in Err; ValidateWorkload
// returns them too (wrapped, test with errors.Is).
var (
	ErrUnknownProject     = errors.New("gpu: unknown project")
	ErrPriorityOutOfRange = errors.New("gpu: priority outside the project's allowed range")
	ErrEmptyGang          = errors.New("gpu: workload requests no GPUs")
	ErrDuplicateID        = errors.New("gpu: duplicate workload ID")
)

// WaitReason classifies why a pending workload was not admitted.
type WaitReason string

// Wait reasons, from the first check that failed.
const (
	// WaitInvalid: the workload can never be admitted as submitted; Err
	// says why.
	WaitInvalid WaitReason = "Invalid"
	// WaitQuota: the project's quota (nominal plus what it may borrow now)
	// is too small for the gang. Resource, Needed and Quota are set.
	WaitQuota WaitReason = "Quota"
	// WaitCapacity: fewer free units of Resource than Needed in the pool.
	WaitCapacity WaitReason = "Capacity"
	// WaitNoNodeFits: enough free units in total, but no set of nodes
	// fits the gang's pods (per-node free units, taints, readiness).
	WaitNoNodeFits WaitReason = "NoNodeFits"
	// WaitNeverFits: the gang would not fit even if no Atelier workload
	// ran (a pod larger than any node, more than the pool, intolerable
	// taints).
	WaitNeverFits WaitReason = "NeverFits"
	// WaitReservation: the workload would fit, but only in capacity held
	// for a higher-ranked workload (BlockedBy).
	WaitReservation WaitReason = "Reservation"
	// WaitPreemption: victims were chosen for the workload; it waits for
	// them to end. Victims lists them.
	WaitPreemption WaitReason = "Preemption"
)

// Wait explains why a pending workload was not admitted in this cycle.
// It holds the figures; Message renders them for users (it is computed on
// demand so that a cycle over thousands of waiting workloads formats
// nothing). Wait encodes to JSON as is (Err is not encoded; Detail holds
// its text).
type Wait struct {
	Workload string
	// Position is the 1-based rank in this cycle's decision order (shared
	// with Admission.Position).
	Position int
	// Priority is the effective (aged) priority it was ranked with.
	Priority int
	Reason   WaitReason
	// Err is set for WaitInvalid (one of the sentinel errors, wrapped);
	// Detail is its text.
	Err    error `json:"-"`
	Detail string

	// Resource and Needed: the resource that blocked and the units the
	// gang needs of it. Free: free units in the pool (WaitCapacity,
	// WaitNoNodeFits, WaitReservation). Offered: what ready, tolerated
	// nodes offer with no Atelier workload running (WaitNeverFits).
	Resource Resource
	Needed   int
	Free     int
	Offered  int
	// Quota holds the quota figures when the quota blocked (WaitQuota, or
	// WaitPreemption after a quota shortfall).
	Quota *QuotaShortfall
	// HoldsReservation: this workload holds capacity (Plan.Reservations).
	HoldsReservation bool
	// BlockedBy is the workload whose reservation holds the capacity
	// (WaitReservation).
	BlockedBy string
	// Victims are the running workloads preempted for it (WaitPreemption).
	Victims []string
	// PreemptionFutile: a victim search ran and evicting every eligible
	// workload would still not make room.
	PreemptionFutile bool
}

// QuotaShortfall is a project's quota position for the resource that
// blocked a workload: its usage, nominal quota, how much more it may
// borrow now, its borrowing limit, its cohort and the cohort's unused
// lendable units.
type QuotaShortfall struct {
	Project        string
	Cohort         string
	Used           int
	Nominal        int
	Borrowable     int
	BorrowingLimit Limit
	CohortLendable int
}

// Message is the explanation served to users ("why is my job pending").
func (w Wait) Message() string {
	var m string
	switch w.Reason {
	case WaitInvalid:
		return "invalid: " + w.Detail
	case WaitQuota:
		q := w.Quota
		if q == nil {
			q = &QuotaShortfall{}
		}
		limit := "unlimited"
		if q.BorrowingLimit != Unlimited {
			limit = fmt.Sprint(int(q.BorrowingLimit))
		}
		m = fmt.Sprintf("quota: project %q needs %d %s but may use only %d more: it uses %d of its nominal %d, borrowing limit %s, cohort %q has %d unused lendable",
			q.Project, w.Needed, w.Resource, max(0, q.Nominal-q.Used)+q.Borrowable, q.Used, q.Nominal, limit, q.Cohort, q.CohortLendable)
	case WaitCapacity:
		m = fmt.Sprintf("capacity: needs %d %s, %d free in the pool", w.Needed, w.Resource, w.Free)
	case WaitNoNodeFits:
		m = fmt.Sprintf("placement: needs %d %s and %d are free, but no set of nodes fits the gang's pods (free units per node, taints, readiness)", w.Needed, w.Resource, w.Free)
	case WaitNeverFits:
		return fmt.Sprintf("placement: the gang can never fit: needs %d %s in pods that no set of ready, tolerated nodes can hold even with no Atelier workload running (they offer %d in total)", w.Needed, w.Resource, w.Offered)
	case WaitReservation:
		return fmt.Sprintf("reservation: needs %d %s; %d are free but held for higher-ranked workload %q, which is waiting for capacity", w.Needed, w.Resource, w.Free, w.BlockedBy)
	case WaitPreemption:
		return fmt.Sprintf("preemption: waiting for %d preempted workload(s) to end: %s", len(w.Victims), strings.Join(w.Victims, ", "))
	default:
		m = string(w.Reason)
	}
	if w.PreemptionFutile {
		m += "; preempting every eligible workload would still not make room"
	}
	if w.HoldsReservation {
		m += holdsSuffix
	}
	return m
}

const holdsSuffix = "; holds a reservation on the free part of the nodes it will use, so smaller workloads cannot take it"
