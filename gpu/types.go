package gpu

import "time"

// Resource names what a quota counts and what a pod requests: a whole-GPU
// product, as in the node label nvidia.com/gpu.product (for example
// "NVIDIA-A100-SXM4-80GB"), or a MIG profile, as in the extended resource
// name (for example "nvidia.com/mig-1g.10gb"). Quotas, free capacity and
// requests are integers of that resource: GPUs, or MIG slices.
type Resource string

// Kubernetes names the inventory helper reads (see NodesFromKubernetes).
const (
	LabelGPUProduct   = "nvidia.com/gpu.product"
	LabelGPUMemory    = "nvidia.com/gpu.memory" // MiB per GPU
	ResourceGPU       = "nvidia.com/gpu"
	ResourceMIGPrefix = "nvidia.com/mig-"
)

// Inventory is the GPU capacity of one cluster or pool at snapshot time.
type Inventory struct {
	Nodes []Node
}

// Node is one node's GPU capacity. Capacity used by Atelier's own running
// workloads is not recorded here: the scheduler derives it from
// Snapshot.Running's placements.
type Node struct {
	Name string
	// GPUType is the whole-GPU product (label nvidia.com/gpu.product); empty
	// when the node has no whole GPUs to offer.
	GPUType Resource
	// GPUMemoryMiB is the memory of one GPU (label nvidia.com/gpu.memory).
	// Carried for display; the scheduler matches on GPUType only.
	GPUMemoryMiB int64
	// GPUs is the allocatable whole-GPU count (nvidia.com/gpu).
	GPUs int
	// GPUsInUse is held by pods Atelier does not own.
	GPUsInUse int
	// MIG lists the MIG slices the node offers, one entry per profile.
	MIG []MIGSlices
	// Taints with effect NoSchedule or NoExecute keep pods off the node
	// unless tolerated; PreferNoSchedule is ignored.
	Taints []Taint
	// Ready is the node's Ready condition; Unschedulable is
	// spec.unschedulable (cordoned). A node that is not ready or is
	// cordoned offers no capacity; workloads already placed on it keep
	// counting against quota.
	Ready         bool
	Unschedulable bool
}

// MIGSlices is a node's capacity of one MIG profile.
type MIGSlices struct {
	Profile     Resource // e.g. "nvidia.com/mig-1g.10gb"
	Allocatable int
	InUse       int // by pods Atelier does not own
}

// TaintEffect is a Kubernetes taint effect.
type TaintEffect string

// Taint effects. Only NoSchedule and NoExecute restrict admission.
const (
	NoSchedule       TaintEffect = "NoSchedule"
	PreferNoSchedule TaintEffect = "PreferNoSchedule"
	NoExecute        TaintEffect = "NoExecute"
)

// Taint is a node taint.
type Taint struct {
	Key, Value string
	Effect     TaintEffect
}

// Toleration follows Kubernetes semantics: Operator "Exists" matches any
// value (and, with an empty Key, any taint); "Equal" (or empty) matches
// Key and Value. An empty Effect matches every effect.
type Toleration struct {
	Key, Operator, Value string
	Effect               TaintEffect
}

// tolerates reports whether t tolerates taint x.
func (t Toleration) tolerates(x Taint) bool {
	if t.Effect != "" && t.Effect != x.Effect {
		return false
	}
	if t.Operator == "Exists" {
		return t.Key == "" || t.Key == x.Key
	}
	return t.Key == x.Key && t.Value == x.Value
}

// Unlimited is the Limit value with no bound.
const Unlimited Limit = -1

// Limit bounds borrowing or lending, in units of the quota's resource. The
// zero value is 0 (nothing); Unlimited (-1) removes the bound.
type Limit int

// Policy is the admission policy: quotas, cohorts, weights, priorities,
// aging and preemption guards.
type Policy struct {
	Projects []ProjectPolicy
	// AgingStep and AgingCap: a pending workload's effective priority is
	// its base priority + min(AgingCap, waited/AgingStep). Zero means the
	// defaults (DefaultAgingStep, DefaultAgingCap); a negative AgingCap
	// disables aging.
	AgingStep time.Duration
	AgingCap  int
	// MinRuntime: a workload admitted less than MinRuntime ago is never a
	// preemption victim. Zero means DefaultMinRuntime; negative means none.
	MinRuntime time.Duration
	// MaxPreemptionSearches bounds how many pending workloads may run a
	// victim search in one cycle (the search is the only part that scans
	// running workloads). Zero means DefaultMaxPreemptionSearches.
	MaxPreemptionSearches int
}

// Defaults for the zero values of Policy.
const (
	DefaultAgingStep             = 10 * time.Minute
	DefaultAgingCap              = 10
	DefaultMinRuntime            = 5 * time.Minute
	DefaultMaxPreemptionSearches = 64
	// DefaultCohort is the cohort of projects that name none.
	DefaultCohort = "default"
)

// ProjectPolicy is one project's admission policy.
type ProjectPolicy struct {
	Name string
	// Cohort groups projects that lend each other unused quota; empty
	// means DefaultCohort.
	Cohort string
	// Weight scales the project's fair share (2 means it is entitled to
	// twice the share of a weight-1 project). Zero or negative means 1.
	Weight float64
	// DefaultPriority applies to workloads that name none; a workload's
	// priority must lie in [MinPriority, MaxPriority]. With both bounds
	// zero, only priority 0 is allowed.
	DefaultPriority          int
	MinPriority, MaxPriority int
	Quotas                   []Quota
}

// Quota is a project's quota of one resource. A project has no quota
// (nominal 0, nothing to borrow) for a resource it does not list.
type Quota struct {
	Resource Resource
	// Nominal is the amount guaranteed to the project.
	Nominal int
	// BorrowingLimit is how far above Nominal the project may go by
	// borrowing from its cohort.
	BorrowingLimit Limit
	// LendingLimit is how much of its unused Nominal the cohort may borrow
	// (Unlimited: all of it). The rest is never lent.
	LendingLimit Limit
}

// PodSet is count identical pods, each requesting Per units of Resource
// (whole GPUs of a product, or slices of a MIG profile).
type PodSet struct {
	Name        string
	Count       int
	Per         int
	Resource    Resource
	Tolerations []Toleration
}

// Workload is a gang of pod sets admitted all together or not at all. Its
// cohort is its project's.
type Workload struct {
	ID      string
	Project string
	// Priority is the base priority; nil means the project's default.
	Priority  *int
	Submitted time.Time
	PodSets   []PodSet
	// NoPreempt keeps the workload from ever being a victim once running:
	// a run's shared RayCluster, whose eviction would fail every step
	// using it. It still waits for quota and capacity like any workload.
	NoPreempt bool `json:",omitempty"`
}

// Assignment places Pods pods of pod set PodSet (index in
// Workload.PodSets) on Node.
type Assignment struct {
	PodSet int
	Node   string
	Pods   int
}

// Running is an admitted workload. The scheduler derives node and quota
// usage from it; Placement must be what the admission said.
type Running struct {
	Workload
	Admitted  time.Time
	Placement []Assignment
	// Borrowed is informational (the scheduler recomputes borrowing from
	// usage and quotas).
	Borrowed bool
}

// Snapshot is everything one decision cycle reads. Now replaces the clock.
type Snapshot struct {
	Now       time.Time
	Inventory Inventory
	Policy    Policy
	Running   []Running
	Pending   []Workload
}

// Amount is a quantity of one resource.
type Amount struct {
	Resource Resource
	Units    int
}

// Plan is one cycle's decisions. Admissions and Waits are in decision
// order (Position ascending); Preemptions are grouped by the workload they
// make room for, in decision order.
type Plan struct {
	Admissions   []Admission
	Preemptions  []Preemption
	Reservations []Reservation
	// Waits explains every pending workload that was not admitted.
	Waits []Wait
}

// Admission admits a pending workload.
type Admission struct {
	Workload string
	Position int
	// Priority is the effective priority the workload was ranked with.
	Priority  int
	Placement []Assignment
	// Borrowed is what the admission borrows from its cohort, per
	// resource (only resources with Units > 0), sorted by resource.
	Borrowed []Amount
}

// PreemptionReason says why a running workload is evicted.
type PreemptionReason string

// Preemption reasons.
const (
	// ReclaimQuota: the victim's project borrows quota that the
	// preemptor's project lent and needs back within its nominal.
	ReclaimQuota PreemptionReason = "ReclaimQuota"
	// Priority: the victim has a strictly lower base priority.
	Priority PreemptionReason = "Priority"
)

// Preemption evicts a running workload to make room for another.
type Preemption struct {
	Victim string
	Reason PreemptionReason
	For    string
}

// ReservationKind says why capacity is held for a pending workload.
type ReservationKind string

// Reservation kinds.
const (
	// ReserveBlocked: the highest-ranked workload blocked by capacity on a
	// resource holds the free part of the nodes it will use, so that
	// smaller workloads cannot keep taking it.
	ReserveBlocked ReservationKind = "Blocked"
	// ReservePreempting: a workload waiting for its victims to end holds
	// the free part of its future placement and its quota.
	ReservePreempting ReservationKind = "Preempting"
)

// Reservation is free capacity held this cycle for a pending workload.
type Reservation struct {
	Workload string
	Kind     ReservationKind
	// Nodes lists the held units per node and resource, sorted by node.
	Nodes []NodeAmount
}

// NodeAmount is a quantity of one resource on one node.
type NodeAmount struct {
	Node     string
	Resource Resource
	Units    int
}
