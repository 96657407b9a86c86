package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/schema"
)

// GPUPolicyStore holds the projects' GPU admission policies.
type GPUPolicyStore interface {
	PutGPUPolicy(ctx context.Context, p catalog.GPUPolicy) (catalog.GPUPolicy, error)
	GetGPUPolicy(ctx context.Context, project string) (catalog.GPUPolicy, error)
	DeleteGPUPolicy(ctx context.Context, project string) error
}

// GetGPUPolicy returns a project's GPU policy (any member may read it).
func (s *server) GetGPUPolicy(ctx context.Context, req gen.GetGPUPolicyRequestObject) (gen.GetGPUPolicyResponseObject, error) {
	p, err := s.cat.GetGPUPolicy(ctx, req.Project)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, notFound("project %q has no GPU policy (and so no GPU quota)", req.Project)
	}
	if err != nil {
		return nil, internalError(err)
	}
	return gen.GetGPUPolicy200JSONResponse(gpuPolicyView(p, nil)), nil
}

// PutGPUPolicy replaces a project's GPU policy (admin). Every problem comes
// back at once; a quota above what the clusters offer is stored with a
// warning.
func (s *server) PutGPUPolicy(ctx context.Context, req gen.PutGPUPolicyRequestObject) (gen.PutGPUPolicyResponseObject, error) {
	in := deref(req.Body)
	p := gpu.ProjectPolicy{
		Name: req.Project, Cohort: deref(in.Cohort), Weight: float64(deref(in.Weight)),
		DefaultPriority: deref(in.DefaultPriority), MinPriority: deref(in.MinPriority), MaxPriority: deref(in.MaxPriority),
	}
	for _, q := range deref(in.Quotas) {
		p.Quotas = append(p.Quotas, gpu.Quota{Resource: gpu.Resource(q.Resource), Nominal: q.Nominal,
			BorrowingLimit: gpu.Limit(deref(q.BorrowingLimit)), LendingLimit: gpu.Limit(deref(q.LendingLimit))})
	}
	if problems := p.Problems(); len(problems) > 0 {
		fields := views(problems, func(pr schema.Problem) gen.FieldError { return gen.FieldError{Path: pr.Path, Message: pr.Message} })
		return nil, newProblem(ptInvalidPolicy, "%s", summarize(fields)).withErrors(fields)
	}
	stored, err := s.cat.PutGPUPolicy(ctx, catalog.GPUPolicy{ProjectPolicy: p})
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, notFound("project %q does not exist", req.Project)
	}
	if err != nil {
		return nil, internalError(err)
	}
	clusters, err := s.cat.ListClusters(ctx)
	if err != nil {
		return nil, internalError(err)
	}
	return gen.PutGPUPolicy200JSONResponse(gpuPolicyView(stored, quotaWarnings(stored, clusters))), nil
}

// DeleteGPUPolicy removes a project's GPU policy (admin).
func (s *server) DeleteGPUPolicy(ctx context.Context, req gen.DeleteGPUPolicyRequestObject) (gen.DeleteGPUPolicyResponseObject, error) {
	err := s.cat.DeleteGPUPolicy(ctx, req.Project)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, notFound("project %q has no GPU policy", req.Project)
	}
	if err != nil {
		return nil, internalError(err)
	}
	return gen.DeleteGPUPolicy204Response{}, nil
}

// quotaWarnings names each quota above what the registered clusters offer
// in total: accepted (clusters grow, or register later), but said.
func quotaWarnings(p catalog.GPUPolicy, clusters []catalog.Cluster) []string {
	offered := map[gpu.Resource]int{}
	for _, c := range clusters {
		if c.Capacity == nil {
			continue
		}
		for _, n := range c.Capacity.GPUNodes {
			if n.GPUType != "" {
				offered[n.GPUType] += n.GPUs
			}
			for _, m := range n.MIG {
				offered[m.Profile] += m.Allocatable
			}
		}
	}
	var out []string
	for _, q := range p.Quotas {
		if have := offered[q.Resource]; q.Nominal > have {
			out = append(out, fmt.Sprintf("quota of %d %s is above the %d the registered clusters offer: workloads beyond that wait for capacity", q.Nominal, q.Resource, have))
		}
	}
	return out
}

// ListGPUs sums the GPU inventory of every registered cluster by type.
func (s *server) ListGPUs(ctx context.Context, _ gen.ListGPUsRequestObject) (gen.ListGPUsResponseObject, error) {
	clusters, err := s.cat.ListClusters(ctx)
	if err != nil {
		return nil, internalError(err)
	}
	return gen.ListGPUs200JSONResponse(gpuSummary(clusters)), nil
}

func gpuSummary(clusters []catalog.Cluster) gen.GPUSummary {
	byType := map[string]*gen.GPUTypeSummary{}
	entry := func(res, cluster string) *gen.GPUTypeSummary {
		e := byType[res]
		if e == nil {
			e = &gen.GPUTypeSummary{Resource: res, Clusters: []string{}}
			byType[res] = e
		}
		if !slices.Contains(e.Clusters, cluster) {
			e.Clusters = append(e.Clusters, cluster)
		}
		return e
	}
	for _, c := range clusters {
		if c.Capacity == nil {
			continue
		}
		for _, n := range c.Capacity.GPUNodes {
			if !n.Ready || n.Unschedulable {
				continue
			}
			if n.GPUType != "" && n.GPUs > 0 {
				e := entry(string(n.GPUType), c.Name)
				e.Nodes++
				e.Allocatable += n.GPUs
				e.InUse += n.GPUsInUse
				e.MemoryMiB = opt(n.GPUMemoryMiB)
			}
			for _, m := range n.MIG {
				e := entry(string(m.Profile), c.Name)
				e.Nodes++
				e.Allocatable += m.Allocatable
				e.InUse += m.InUse
			}
		}
	}
	out := gen.GPUSummary{Gpus: []gen.GPUTypeSummary{}}
	for _, e := range byType {
		slices.Sort(e.Clusters)
		out.Gpus = append(out.Gpus, *e)
	}
	slices.SortFunc(out.Gpus, func(a, b gen.GPUTypeSummary) int { return strings.Compare(a.Resource, b.Resource) })
	return out
}

// GetClusterQueue serves a cluster's admission queue. Other projects'
// entries keep their place and size but not their names, unless the
// token is an admin's.
func (s *server) GetClusterQueue(ctx context.Context, req gen.GetClusterQueueRequestObject) (gen.GetClusterQueueResponseObject, error) {
	if _, err := s.cat.GetCluster(ctx, req.Cluster); errors.Is(err, catalog.ErrNotFound) {
		return nil, notFound("cluster %q is not registered", req.Cluster)
	} else if err != nil {
		return nil, internalError(err)
	}
	qctx, cancel := context.WithTimeout(ctx, s.queryTimeout)
	defer cancel()
	q, err := s.eng.QueryAdmissionQueue(qctx, req.Cluster)
	if err != nil {
		return nil, newProblem(ptUnavailable, "the admission queue of cluster %s cannot be read right now; retry in a few seconds", req.Cluster).
			withHeader("Retry-After", retryAfterSeconds).withCause(err)
	}
	tok := principal(ctx)
	return gen.GetClusterQueue200JSONResponse(admissionQueueView(q, func(project string) bool {
		return tok.Role == tokens.RoleAdmin || tok.Project == project
	})), nil
}

func admissionQueueView(q activities.AdmissionQueue, visible func(project string) bool) gen.AdmissionQueue {
	entry := func(e activities.QueueEntry) gen.QueueEntry { return queueEntryView(e, visible(e.Project)) }
	return gen.AdmissionQueue{Cluster: q.Cluster, DecidedAt: q.DecidedAt, Pending: views(q.Pending, entry), Running: views(q.Running, entry)}
}

func queueEntryView(e activities.QueueEntry, visible bool) gen.QueueEntry {
	v := gen.QueueEntry{Submitted: e.Submitted, Position: opt(e.Position), Priority: ptr(e.Priority), Reason: opt(e.Reason), Admitted: e.Admitted,
		Gpus: views(e.GPUs, func(a gpu.Amount) gen.GPUAmount { return gen.GPUAmount{Resource: string(a.Resource), Units: a.Units} })}
	if visible {
		v.Workload, v.Project, v.Run, v.Step, v.Message = opt(e.Workload), opt(e.Project), opt(e.Run), opt(e.Step), opt(e.Message)
		if len(e.Nodes) > 0 {
			v.Nodes = &e.Nodes
		}
	}
	return v
}

func gpuPolicyView(p catalog.GPUPolicy, warnings []string) gen.GPUPolicy {
	return gen.GPUPolicy{Project: p.Name, Cohort: opt(p.Cohort), Weight: opt(float32(p.Weight)),
		// Priorities of 0 are values, not absences.
		DefaultPriority: ptr(p.DefaultPriority), MinPriority: ptr(p.MinPriority), MaxPriority: ptr(p.MaxPriority),
		UpdatedAt: p.UpdatedAt, Warnings: optSlice(warnings),
		Quotas: views(p.Quotas, func(q gpu.Quota) gen.GPUQuota {
			return gen.GPUQuota{Resource: string(q.Resource), Nominal: q.Nominal,
				BorrowingLimit: opt(int(q.BorrowingLimit)), LendingLimit: opt(int(q.LendingLimit))}
		})}
}

// checkGPUPriority refuses a run priority outside the project's range
// (422) when the project has a GPU policy; without one, the run's GPU
// steps say why they cannot be admitted.
func (s *server) checkGPUPriority(ctx context.Context, project string, prio *int) error {
	if prio == nil {
		return nil
	}
	p, err := s.cat.GetGPUPolicy(ctx, project)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil
	}
	if err != nil {
		return internalError(err)
	}
	if *prio < p.MinPriority || *prio > p.MaxPriority {
		fe := []gen.FieldError{{Path: "gpuPriority", Message: fmt.Sprintf("must lie in the project's GPU priority range [%d, %d]", p.MinPriority, p.MaxPriority)}}
		return newProblem(ptInvalidParams, "%s", summarize(fe)).withErrors(fe)
	}
	return nil
}
