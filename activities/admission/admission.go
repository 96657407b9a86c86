package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// Catalog is what the activities read.
type Catalog interface {
	ListGPUPolicies(ctx context.Context) ([]catalog.GPUPolicy, error)
	GetCluster(ctx context.Context, name string) (catalog.Cluster, error)
	EndedRuns(ctx context.Context, ids []string) ([]string, error)
}

// Starter starts or signals the admission workflows (a client.Client).
type Starter interface {
	SignalWithStartWorkflow(ctx context.Context, workflowID, signalName string, signalArg any,
		options client.StartWorkflowOptions, workflow any, workflowArgs ...any) (client.WorkflowRun, error)
}

// PolicyCacheTTL bounds how stale the policies Submit validates against
// may be: a policy change reaches submissions within this time (the
// admission workflow itself re-reads them every admission.Refresh).
const PolicyCacheTTL = 5 * time.Second

// Activities are the GPU admission activities of a worker.
type Activities struct {
	cat        Catalog
	temporal   Starter
	taskQueue  string
	minRuntime time.Duration
	now        func() time.Time

	mu       sync.Mutex
	policy   gpu.Policy
	policyAt time.Time
}

// Option configures New.
type Option func(*Activities)

// WithMinRuntime sets gpu.Policy.MinRuntime: how long an admitted workload
// runs before it may be preempted (default gpu.DefaultMinRuntime).
func WithMinRuntime(d time.Duration) Option { return func(a *Activities) { a.minRuntime = d } }

// New returns the activities; admission workflows they start run on
// taskQueue (the main worker's, which registers admission.Workflow).
func New(cat Catalog, temporal Starter, taskQueue string, opts ...Option) *Activities {
	a := &Activities{cat: cat, temporal: temporal, taskQueue: taskQueue, now: time.Now}
	for _, o := range opts {
		o(a)
	}
	return a
}

// Register registers both activities under their contract names (the
// snapshot is run as a local activity, which needs the same registration).
func (a *Activities) Register(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(a.Submit, activity.RegisterOptions{Name: activities.SubmitWorkloadName})
	reg.RegisterActivityWithOptions(a.SubmitBatch, activity.RegisterOptions{Name: activities.SubmitWorkloadsName})
	reg.RegisterActivityWithOptions(a.LoadSnapshot, activity.RegisterOptions{Name: activities.LoadAdmissionSnapshotName})
}

// LoadSnapshot reads a cluster's GPU inventory and the GPU policies, and
// which of the given runs have ended. A cluster that has not reported yet
// has an empty inventory: its workloads wait, saying that nothing offers
// the GPUs they need.
func (a *Activities) LoadSnapshot(ctx context.Context, req activities.AdmissionSnapshotRequest) (activities.AdmissionSnapshot, error) {
	var out activities.AdmissionSnapshot
	inv, err := a.inventory(ctx, req.Cluster)
	if err != nil {
		return out, err
	}
	out.Inventory = inv
	if out.Policy, err = a.loadPolicy(ctx); err != nil {
		return out, err
	}
	if out.EndedRuns, err = a.cat.EndedRuns(ctx, req.Runs); err != nil {
		return out, fmt.Errorf("read ended runs: %w", err)
	}
	return out, nil
}

func (a *Activities) inventory(ctx context.Context, cluster string) (gpu.Inventory, error) {
	c, err := a.cat.GetCluster(ctx, cluster)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
	case err != nil:
		return gpu.Inventory{}, fmt.Errorf("read cluster %s: %w", cluster, err)
	case c.Capacity != nil:
		return gpu.Inventory{Nodes: c.Capacity.GPUNodes}, nil
	}
	return gpu.Inventory{}, nil
}

func (a *Activities) loadPolicy(ctx context.Context) (gpu.Policy, error) {
	policies, err := a.cat.ListGPUPolicies(ctx)
	if err != nil {
		return gpu.Policy{}, fmt.Errorf("read GPU policies: %w", err)
	}
	out := gpu.Policy{MinRuntime: a.minRuntime}
	for _, p := range policies {
		out.Projects = append(out.Projects, p.ProjectPolicy)
	}
	a.mu.Lock()
	a.policy, a.policyAt = out, a.now()
	a.mu.Unlock()
	return out, nil
}

// cachedPolicy is the policy at most PolicyCacheTTL old: submissions come
// in bursts (a forEach of GPU steps), and each would otherwise read every
// project's policy.
func (a *Activities) cachedPolicy(ctx context.Context) (gpu.Policy, error) {
	a.mu.Lock()
	p, at := a.policy, a.policyAt
	a.mu.Unlock()
	if !at.IsZero() && a.now().Sub(at) < PolicyCacheTTL {
		return p, nil
	}
	return a.loadPolicy(ctx)
}

// Submit queues a step's workload with its cluster's admission workflow.
// With no GPU policy in the installation, admission is off: the result
// says so and nothing is queued. A gang that names no GPU type gets the
// cluster's only one; with several, the step must choose. A workload the
// policy refuses (project without a policy, priority out of range) is a
// non-retryable InvalidStep saying what to change.
func (a *Activities) Submit(ctx context.Context, req activities.SubmitWorkloadRequest) (activities.SubmitWorkloadResult, error) {
	// Runs that submit one at a time take their answers one signal each:
	// their workload travels as a plain submit, not in a batch.
	res, err := a.submit(ctx, activities.SubmitWorkloadsRequest{Cluster: req.Cluster, Requests: []activities.SubmitWorkloadRequest{req}}, false)
	switch {
	case err != nil:
		return activities.SubmitWorkloadResult{}, err
	case res.Results[0].Refused != "":
		return activities.SubmitWorkloadResult{}, temporal.NewNonRetryableApplicationError(res.Results[0].Refused, activities.ErrTypeInvalidStep, nil)
	}
	return res.Results[0].SubmitWorkloadResult, nil
}

// MaxBatchSignal bounds the submits one signal to the admission workflow
// carries, so that a burst of thousands of items stays far below
// Temporal's payload limits.
const MaxBatchSignal = 500

// SubmitBatch queues several steps' workloads with one cluster's admission
// workflow: the cluster and the policies are read once, and every accepted
// workload travels in one AdmissionBatch signal (per MaxBatchSignal), whose
// answers come back grouped per run. A refused workload is answered in its
// outcome; the others are queued. An error is for the whole batch (e.g.
// Temporal unreachable), and retrying it queues nothing twice: the
// admission workflow ignores a workload it already holds.
func (a *Activities) SubmitBatch(ctx context.Context, req activities.SubmitWorkloadsRequest) (activities.SubmitWorkloadsResult, error) {
	return a.submit(ctx, req, true)
}

func (a *Activities) submit(ctx context.Context, req activities.SubmitWorkloadsRequest, grouped bool) (activities.SubmitWorkloadsResult, error) {
	out := activities.SubmitWorkloadsResult{Results: make([]activities.SubmitWorkloadOutcome, len(req.Requests))}
	policy, err := a.cachedPolicy(ctx)
	if err != nil {
		return out, err
	}
	if len(policy.Projects) == 0 {
		return out, nil // admission off: nothing queued
	}
	c, err := a.cat.GetCluster(ctx, req.Cluster)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
	case err != nil:
		return out, fmt.Errorf("read cluster %s: %w", req.Cluster, err)
	}
	var capacity catalog.ClusterCapacity
	if c.Capacity != nil {
		capacity = *c.Capacity
	}
	var batch []activities.AdmissionRequest
	for i, r := range req.Requests {
		res := &out.Results[i]
		// Kueue admits the kinds it integrates with instead;
		// SparkApplications, which it has none for, stay with Atelier.
		if capacity.KueueQueue != "" && r.Kind != "spark" {
			res.KueueQueue = capacity.KueueQueue
			continue
		}
		w, refused := prepare(policy, capacity, req.Cluster, r)
		if refused != "" {
			res.Refused = refused
			continue
		}
		res.Queued, res.Workload = true, w
		batch = append(batch, activities.AdmissionRequest{Op: activities.AdmissionSubmit, Workload: w, Run: r.Run, Step: r.Step})
	}
	if !grouped {
		for _, r := range batch {
			if err := a.signal(ctx, req.Cluster, r); err != nil {
				return out, err
			}
		}
		return out, nil
	}
	for len(batch) > 0 {
		n := min(len(batch), MaxBatchSignal)
		if err := a.signal(ctx, req.Cluster, activities.AdmissionRequest{Op: activities.AdmissionBatch, Requests: batch[:n]}); err != nil {
			return out, err
		}
		batch = batch[n:]
	}
	return out, nil
}

// signal hands req to the cluster's admission workflow, starting it if
// needed.
func (a *Activities) signal(ctx context.Context, cluster string, req activities.AdmissionRequest) error {
	_, err := a.temporal.SignalWithStartWorkflow(ctx, activities.AdmissionWorkflowID(cluster), activities.SignalAdmissionRequest, req,
		client.StartWorkflowOptions{ID: activities.AdmissionWorkflowID(cluster), TaskQueue: a.taskQueue},
		activities.AdmissionWorkflowName, activities.AdmissionInput{Cluster: cluster})
	if err != nil {
		return fmt.Errorf("submit to the admission workflow of cluster %s: %w", cluster, err)
	}
	return nil
}

// prepare resolves a workload's GPU types and checks it against the
// policy; refused says why the admission refuses it.
func prepare(policy gpu.Policy, capacity catalog.ClusterCapacity, cluster string, req activities.SubmitWorkloadRequest) (w gpu.Workload, refused string) {
	w = req.Workload
	w.PodSets = slices.Clone(w.PodSets)
	for i := range w.PodSets {
		if w.PodSets[i].Resource != "" {
			continue
		}
		types := gpuTypes(gpu.Inventory{Nodes: capacity.GPUNodes})
		if len(types) != 1 {
			return w, fmt.Sprintf("step %s asks for GPUs without a type and cluster %s has %s: set resources.gpuType so that GPU admission knows which quota it uses",
				req.Step, cluster, describeTypes(types))
		}
		w.PodSets[i].Resource = types[0]
	}
	if err := gpu.ValidateWorkload(policy, w); err != nil {
		if errors.Is(err, gpu.ErrUnknownProject) {
			return w, fmt.Sprintf("project %s has no GPU policy, so no GPU quota: an admin sets one with PUT /v1/projects/%s/gpu-policy", w.Project, w.Project)
		}
		return w, fmt.Sprintf("GPU admission refuses step %s: %v", req.Step, err)
	}
	return w, ""
}

func gpuTypes(inv gpu.Inventory) []gpu.Resource {
	var out []gpu.Resource
	for _, n := range inv.Nodes {
		if n.GPUType != "" && n.GPUs > 0 && !slices.Contains(out, n.GPUType) {
			out = append(out, n.GPUType)
		}
	}
	slices.Sort(out)
	return out
}

func describeTypes(types []gpu.Resource) string {
	if len(types) == 0 {
		return "no GPU nodes"
	}
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = string(t)
	}
	return "several GPU types (" + strings.Join(names, ", ") + ")"
}
