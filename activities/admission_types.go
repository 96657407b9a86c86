package activities

import "github.com/atelier-ml/atelier/gpu"

// Activity names of GPU admission. Both run on the main worker's control
// queue: they read the catalogue and talk to Temporal, never to a cluster.
const (
	// SubmitWorkloadName hands a step's GPU gang to its cluster's admission
	// workflow, starting that workflow if needed (signal-with-start).
	SubmitWorkloadName = "atelier.gpu.submit"
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
