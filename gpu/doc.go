// Package gpu is Atelier's GPU admission scheduler: pure, deterministic
// domain logic that reads a Snapshot (the clock's Now, the GPU inventory,
// the quota policy, the running and the pending workloads) and returns a
// Plan (admissions with placements, preemptions, reservations, and a Wait
// explaining every pending workload it did not admit):
//
//	plan := gpu.Schedule(gpu.Snapshot{Now: now, Inventory: inv, Policy: pol, Running: run, Pending: queue})
//
// Schedule does no I/O, starts no goroutine, reads no clock and ranges
// over no map whose order could reach the plan (maps serve lookups only;
// iteration is over sorted slices), so it can be called from Temporal
// workflow code; workflowcheck accepts it. The same snapshot gives the
// same plan whatever the order of its slices (property-tested by
// shuffling). The durable owner that calls it is the per-cluster admission
// workflow (admission.Workflow); its activities are in
// activities/admission, the REST endpoints in api/gpus.go.
//
// Subpackages: gpukube builds Nodes from Kubernetes Node objects (and
// counts GPUs held by pods Atelier does not own); gpusynth builds the
// synthetic clusters of the benchmarks.
//
// # Model
//
// A Resource is what quotas count and pods request: a whole-GPU product
// (label nvidia.com/gpu.product, e.g. "NVIDIA-A100-SXM4-80GB") or a MIG
// profile (e.g. "nvidia.com/mig-1g.10gb"), in integer units. A Node offers
// GPUs − GPUsInUse of its GPUType and Allocatable − InUse of each MIG
// profile, minus what Atelier's running workloads placed there; a node
// that is not Ready or is cordoned offers nothing. Taints with effect
// NoSchedule or NoExecute keep a pod set off the node unless it tolerates
// them (Kubernetes toleration rules). GPUMemoryMiB is carried, not
// matched.
//
// A Workload is a gang of PodSets (Count pods × Per units of one Resource,
// with tolerations), admitted all together or not at all. Its project
// comes from the Policy, its cohort from the project (DefaultCohort when
// unnamed), its base priority from Workload.Priority or the project's
// DefaultPriority and must lie in [MinPriority, MaxPriority].
//
// # Quotas and cohorts
//
// A project's Quota for a resource has a Nominal amount, a BorrowingLimit
// (how far above Nominal it may go; Unlimited = -1) and a LendingLimit
// (how much of its Nominal its cohort may borrow while unused; Unlimited
// lends all of it). The zero value of both limits is 0: no borrowing, no
// lending. A project has no quota for a resource it does not list. For a
// project p and resource r, with g = Nominal − lendable the part never
// lent:
//
//   - usage(p, r) ≤ Nominal + BorrowingLimit, and
//   - Σ over the cohort's projects of max(0, usage − g) ≤ Σ of lendable:
//     what projects take beyond their unlent part comes from the cohort's
//     lendable pool, which their own lendable part joined.
//
// An admission is allowed only if both hold afterwards. Admission.Borrowed
// reports how much the admission takes above the project's Nominal.
//
// # Order: fair share, priority, aging
//
// Pending workloads are decided one at a time, all in one cycle. The next
// one is the head of the project with the lowest weighted dominant share,
// max over resources of usage / Nominal (the cohort's total Nominal for a
// resource the project has no Nominal of), divided by Weight. Usage counts
// running workloads and the admissions and preemption holds already
// decided in this cycle, so shares are recomputed after each decision.
// Ties go to the head with the higher effective priority, then the earlier
// submit time, then the smaller ID, then the project name. Within a
// project, the queue is in that same order. Workloads of unknown projects
// are explained first. Projects of all cohorts are ranked together (node
// capacity is shared); cohorts only bound quotas and preemption.
//
// The effective priority is the base priority plus one per AgingStep
// waited (Now − Submitted), capped at AgingCap (defaults:
// DefaultAgingStep = 10 min, DefaultAgingCap = 10; a negative AgingCap
// disables aging). Aging only orders the queue: preemption compares base
// priorities, so a workload cannot gain the power to evict by waiting and
// no two workloads can evict each other in turn.
//
// # Deciding one workload
//
//  1. Invalid (unknown project, priority out of range, empty gang, an ID
//     used twice among pending and running): WaitInvalid with a sentinel
//     error (ErrUnknownProject, ErrPriorityOutOfRange, ErrEmptyGang,
//     ErrDuplicateID). ValidateWorkload runs the same checks up front.
//  2. Quota (the first resource whose need exceeds the project's headroom):
//     a victim search (below), else WaitQuota.
//  3. Capacity, O(1) per resource: the pool's free units (excluding held
//     ones) against the gang's need; then placement, first fit in node
//     name order, as many pods per node as fit. A pod set shape that
//     failed to place is remembered for the cycle (free units only shrink)
//     so equal or bigger shapes are rejected at once. If it fits: admitted
//     (no one-per-cycle limit: every workload that fits free capacity and
//     quota is admitted in the same cycle).
//  4. Otherwise, in order: WaitReservation if it would fit in capacity held
//     for a higher-ranked workload; a victim search; else a reservation if
//     none of its resources has one yet (WaitCapacity or WaitNoNodeFits
//     with HoldsReservation); WaitNeverFits, without reservation, if it
//     could not fit even with no Atelier workload running.
//
// # Reservations (head-of-line blocking)
//
// A workload that fits may pass a bigger one that does not (backfill).
// To keep the bigger one from starving, the highest-ranked workload
// blocked by capacity on a resource (within quota) holds a ReserveBlocked
// reservation: it picks the nodes it would use if Atelier's running work
// ended (most free units first, then name) and holds their currently free
// units, up to its need; lower-ranked workloads cannot use them. Held
// units grow as running work there ends, and the reservation moves only
// to nodes with more free units, so the gang is admitted once running work
// ends (property-tested: with every workload running at most R cycles, a
// gang of U units waits at most (U+1)·R cycles behind a stream of small
// workloads). One reservation per resource; a reservation does not charge
// quota. Reservations are recomputed each cycle from the snapshot.
//
// # Preemption
//
// A victim search runs for a workload blocked by quota or capacity, when a
// cheap check says a victim may exist, for at most MaxPreemptionSearches
// workloads per cycle (DefaultMaxPreemptionSearches = 64; later blocked
// workloads just wait). Candidates are running workloads of the same
// cohort that use a resource the preemptor needs and have run at least
// MinRuntime (DefaultMinRuntime = 5 min; younger ones are never victims,
// nor are workloads marked NoPreempt, such as a run's shared RayCluster):
//
//   - ReclaimQuota: the preemptor's project stays within its Nominal for
//     every resource of the gang, and the candidate's project uses more
//     than its Nominal of one of them (it borrows what others lent); any
//     priority.
//   - Priority: the candidate has a strictly lower base priority and is
//     in the same project, or in another project of the cohort that is
//     borrowing.
//
// Borrowing is judged as the search goes (victims already chosen are
// gone). Candidates are taken lowest base priority first, then most
// recently admitted, then by ID, until the gang would fit quota and
// capacity; then every victim whose return would still let it fit is
// spared, the most valuable first. If even all candidates do not make it
// fit, nobody is preempted (Wait.PreemptionFutile). On success the plan
// lists the Preemptions; the preemptor waits (WaitPreemption, Victims) and
// holds (ReservePreempting) the free part of its future placement and its
// quota, so lower-ranked workloads do not take what the victims free. The
// caller evicts the victims and keeps them in Snapshot.Running until their
// pods are gone; the next cycles choose the same victims while nothing
// else changes.
//
// # Explanations
//
// Every pending workload not admitted gets one Wait: its Position in the
// cycle's decision order (shared with admissions), its effective priority,
// a Reason, the figures behind it (needed vs free units, quota usage,
// nominal and what it may still borrow, the reservation holder, the
// victims) and Message(), the sentence served to users ("why is my job
// pending"), rendered on demand.
//
// # Cost
//
// One cycle sorts each project's queue once, keeps per-resource free
// totals so that most workloads that cannot fit are rejected in O(1), and
// allocates mostly the plan itself. bench/gpusched and BenchmarkSchedule
// measure 10,000 pending workloads × 1,000 nodes; docs/benchmarks.md has
// the figures.
package gpu
