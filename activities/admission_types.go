package activities

import (
	"time"

	"github.com/atelier-ml/atelier/gpu"
)

// Activity names of GPU admission. Both run on the main worker's control
// queue: they read the catalogue and talk to Temporal, never to a cluster.
const (
	// SubmitWorkloadName hands a step's GPU gang to its cluster's admission
	// workflow, starting that workflow if needed (signal-with-start).
	SubmitWorkloadName = "atelier.gpu.submit"
	// SubmitWorkloadsName hands every GPU gang a run has ready for one
	// cluster at once: one activity and one signal for a burst of forEach
	// items, instead of one each (runs recorded before
	// atelier.gpu-admission-batched use SubmitWorkloadName).
	SubmitWorkloadsName = "atelier.gpu.submit-batch"
	// LoadAdmissionSnapshotName reads what an admission decision needs: the
	// cluster's GPU inventory and every project's GPU policy. The admission
	// workflow runs it as a local activity.
	LoadAdmissionSnapshotName = "atelier.gpu.snapshot"
)

// SubmitWorkloadRequest asks for GPU admission of one step attempt's gang.
type SubmitWorkloadRequest struct {
	Cluster  string       `json:"cluster"`
	Run      string       `json:"run"` // workflow ID, where the answer goes
	Step     string       `json:"step"`
	Item     *int         `json:"item,omitempty"`
	Workload gpu.Workload `json:"workload"`
	// Kind is the step's kind (container, ray, spark): on a cluster whose
	// worker submits to Kueue, the kinds Kueue admits skip Atelier's
	// admission. Empty in requests recorded before it existed.
	Kind string `json:"kind,omitempty"`
}

// SubmitWorkloadResult says whether the step must wait for admission.
type SubmitWorkloadResult struct {
	// Queued is false when the installation has no GPU policy at all: GPU
	// admission is then off and the step runs at once, as before.
	Queued bool `json:"queued"`
	// KueueQueue is set when the cluster's worker submits this step to
	// Kueue instead (Queued is then false): the LocalQueue's name.
	KueueQueue string `json:"kueueQueue,omitempty"`
	// Workload is what was queued, its GPU types resolved.
	Workload gpu.Workload `json:"workload"`
}

// SubmitWorkloadsRequest submits several steps' gangs to one cluster. The
// answers to its workloads come back grouped, in SignalGPUUpdates.
type SubmitWorkloadsRequest struct {
	Cluster  string                  `json:"cluster"`
	Requests []SubmitWorkloadRequest `json:"requests"`
}

// SubmitWorkloadsResult answers each request of a SubmitWorkloadsRequest,
// in order.
type SubmitWorkloadsResult struct {
	Results []SubmitWorkloadOutcome `json:"results"`
}

// SubmitWorkloadOutcome is one request's answer: a result, or why the
// admission refuses that step (the others are unaffected).
type SubmitWorkloadOutcome struct {
	SubmitWorkloadResult
	// Refused is the InvalidStep message of a workload the policy refuses.
	Refused string `json:"refused,omitempty"`
}

// AdmissionSnapshotRequest asks for a cluster's snapshot, and which of the
// runs holding its admitted workloads have ended.
type AdmissionSnapshotRequest struct {
	Cluster string   `json:"cluster"`
	Runs    []string `json:"runs,omitempty"`
}

// AdmissionSnapshot is the part of gpu.Snapshot that comes from the
// catalogue.
type AdmissionSnapshot struct {
	Inventory gpu.Inventory `json:"inventory"`
	Policy    gpu.Policy    `json:"policy"`
	// EndedRuns are those of the request's runs that the catalogue shows
	// ended (e.g. terminated through Temporal, which skips their release):
	// their workloads are freed.
	EndedRuns []string `json:"endedRuns,omitempty"`
}

// GPU admission: one long-running workflow per cluster owns the cluster's
// GPU queue. Pipeline runs submit their GPU steps to it (an activity does a
// signal-with-start), it decides with gpu.Schedule on every change and
// answers each run by signal; the waiting run holds no pod meanwhile. Its
// "queue" query says why each workload waits.
const (
	AdmissionWorkflowName = "atelier.Admission"
	// SignalAdmissionRequest carries an AdmissionRequest to the admission
	// workflow.
	SignalAdmissionRequest = "atelier.admission.request"
	// SignalGPUAdmitted carries a GPUAdmitted to the run that submitted it.
	SignalGPUAdmitted = "atelier.gpu.admitted"
	// SignalGPUWaiting carries a GPUWaiting to a run when the reason its
	// workload waits changes.
	SignalGPUWaiting = "atelier.gpu.waiting"
	// SignalGPUPreempt carries a GPUPreempt to a run whose admitted
	// workload must give its GPUs back.
	SignalGPUPreempt = "atelier.gpu.preempt"
	// SignalGPUUpdates carries a GPUUpdates: every answer of one decision
	// round for a run's workloads submitted by SubmitWorkloadsName.
	SignalGPUUpdates = "atelier.gpu.updates"
	// QueryAdmissionQueue returns the AdmissionQueue.
	QueryAdmissionQueue = "queue"
)

// AdmissionWorkflowID is the workflow ID of a cluster's admission workflow.
func AdmissionWorkflowID(cluster string) string { return "atelier-admission-" + cluster }

// Admission request operations.
const (
	AdmissionSubmit  = "submit"
	AdmissionRelease = "release" // the step ended, or stopped waiting
	// AdmissionBatch carries several submits and releases (Requests) in
	// one signal. Its submits are answered in SignalGPUUpdates.
	AdmissionBatch = "batch"
)

// AdmissionRequest is what runs send their cluster's admission workflow.
type AdmissionRequest struct {
	Op string `json:"op"`
	// Workload is the gang (submit); on release only its ID matters.
	Workload gpu.Workload `json:"workload"`
	Run      string       `json:"run,omitempty"` // workflow ID of the run
	Step     string       `json:"step,omitempty"`
	// Requests are the submits and releases of an AdmissionBatch.
	Requests []AdmissionRequest `json:"requests,omitempty"`
}

// GPUUpdates is what one decision round tells a run about its workloads.
type GPUUpdates struct {
	Admitted []GPUAdmitted `json:"admitted,omitempty"`
	Waiting  []GPUWaiting  `json:"waiting,omitempty"`
	Preempt  []GPUPreempt  `json:"preempt,omitempty"`
}

// GPUAdmitted tells a run that its workload may start.
type GPUAdmitted struct {
	Workload string   `json:"workload"`
	Nodes    []string `json:"nodes"`
	Borrowed bool     `json:"borrowed,omitempty"`
}

// GPUPreempt tells a run to stop an admitted workload: its step's attempt
// is cancelled (objects deleted) and the step queued again, without
// counting against its retries.
type GPUPreempt struct {
	Workload string `json:"workload"`
	// Reason is a gpu.PreemptionReason: ReclaimQuota or Priority.
	Reason string `json:"reason"`
	For    string `json:"for"` // the workload it makes room for
}

// Describe says why the workload is preempted, for the step's attempt.
func (p GPUPreempt) Describe() string {
	switch gpu.PreemptionReason(p.Reason) {
	case gpu.ReclaimQuota:
		return "PREEMPTED: its project borrowed GPUs that their owner reclaims (for " + p.For + ")"
	case gpu.Priority:
		return "PREEMPTED: a higher-priority workload needs its GPUs (" + p.For + ")"
	}
	return "PREEMPTED: " + p.Reason + " (for " + p.For + ")"
}

// GPUWaiting tells a run why its workload waits.
type GPUWaiting struct {
	Workload string `json:"workload"`
	Message  string `json:"message"`
}

// AdmissionInput is the admission workflow's input: its cluster, and the
// queue it carries across continue-as-new.
type AdmissionInput struct {
	Cluster string           `json:"cluster"`
	Pending []QueuedWorkload `json:"pending,omitempty"`
	Running []QueuedWorkload `json:"running,omitempty"`
}

// QueuedWorkload is a workload the admission workflow holds, waiting or
// admitted.
type QueuedWorkload struct {
	Workload gpu.Workload `json:"workload"`
	Run      string       `json:"run"`
	Step     string       `json:"step"`
	// Admitted and Placement are set once admitted.
	Admitted  *time.Time       `json:"admitted,omitempty"`
	Placement []gpu.Assignment `json:"placement,omitempty"`
	// WaitKey is the last wait reason told to the run.
	WaitKey string `json:"waitKey,omitempty"`
	// Preempting is set once the run was told to give its GPUs back.
	Preempting bool `json:"preempting,omitempty"`
	// Grouped workloads came in an AdmissionBatch: their run takes its
	// answers grouped, in SignalGPUUpdates.
	Grouped bool `json:"grouped,omitempty"`
}

// AdmissionQueue is the query answer: the queue as last decided.
type AdmissionQueue struct {
	Cluster   string       `json:"cluster"`
	DecidedAt *time.Time   `json:"decidedAt,omitempty"`
	Pending   []QueueEntry `json:"pending"`
	Running   []QueueEntry `json:"running"`
}

// QueueEntry is one workload of the queue.
type QueueEntry struct {
	Workload  string    `json:"workload"`
	Project   string    `json:"project"`
	Run       string    `json:"run"`
	Step      string    `json:"step"`
	Submitted time.Time `json:"submitted"`
	// GPUs is what the gang asks for, per GPU type.
	GPUs []gpu.Amount `json:"gpus"`
	// Pending workloads: their position in the last decision and why they
	// wait (Reason is a gpu.WaitReason; Message says it for people).
	Position int    `json:"position,omitempty"`
	Priority int    `json:"priority,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
	// Running workloads: when they were admitted and on which nodes.
	Admitted *time.Time `json:"admitted,omitempty"`
	Nodes    []string   `json:"nodes,omitempty"`
}
