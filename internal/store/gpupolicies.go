package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/db"
)

// storedQuota is the JSON of one quota in gpu_policies.quotas: spelled out
// here so that renaming a field of gpu.Quota cannot change stored data.
type storedQuota struct {
	Resource       string `json:"resource"`
	Nominal        int    `json:"nominal"`
	BorrowingLimit int    `json:"borrowingLimit"`
	LendingLimit   int    `json:"lendingLimit"`
}

// PutGPUPolicy stores a project's GPU admission policy, replacing any
// earlier one. The policy must be valid (gpu.ProjectPolicy.Problems); the
// project must exist (else ErrNotFound).
func (s *Store) PutGPUPolicy(ctx context.Context, p catalog.GPUPolicy) (catalog.GPUPolicy, error) {
	quotas := make([]storedQuota, len(p.Quotas))
	for i, q := range p.Quotas {
		quotas[i] = storedQuota{Resource: string(q.Resource), Nominal: q.Nominal, BorrowingLimit: int(q.BorrowingLimit), LendingLimit: int(q.LendingLimit)}
	}
	data, err := json.Marshal(quotas)
	if err != nil {
		return catalog.GPUPolicy{}, fmt.Errorf("put GPU policy of %q: %w", p.Name, err)
	}
	row, err := s.q.PutGPUPolicy(ctx, db.PutGPUPolicyParams{
		Project: p.Name, Cohort: p.Cohort, Weight: p.Weight,
		DefaultPriority: int32(p.DefaultPriority), MinPriority: int32(p.MinPriority), MaxPriority: int32(p.MaxPriority),
		Quotas: data,
	})
	if err != nil {
		return catalog.GPUPolicy{}, mapErr(err, "put GPU policy of %q", p.Name)
	}
	return toGPUPolicy(row)
}

// GetGPUPolicy returns a project's GPU policy, or ErrNotFound when it has
// none (the project then has no GPU quota).
func (s *Store) GetGPUPolicy(ctx context.Context, project string) (catalog.GPUPolicy, error) {
	row, err := s.q.GetGPUPolicy(ctx, project)
	if err != nil {
		return catalog.GPUPolicy{}, mapErr(err, "get GPU policy of %q", project)
	}
	return toGPUPolicy(row)
}

// ListGPUPolicies returns every project's GPU policy, by project name: the
// admission workflow's gpu.Policy.
func (s *Store) ListGPUPolicies(ctx context.Context) ([]catalog.GPUPolicy, error) {
	rows, err := s.q.ListGPUPolicies(ctx)
	if err != nil {
		return nil, mapErr(err, "list GPU policies")
	}
	out := make([]catalog.GPUPolicy, 0, len(rows))
	for _, r := range rows {
		p, err := toGPUPolicy(r)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// DeleteGPUPolicy removes a project's GPU policy, or returns ErrNotFound.
func (s *Store) DeleteGPUPolicy(ctx context.Context, project string) error {
	n, err := s.q.DeleteGPUPolicy(ctx, project)
	if err != nil {
		return mapErr(err, "delete GPU policy of %q", project)
	}
	if n == 0 {
		return fmt.Errorf("delete GPU policy of %q: %w", project, catalog.ErrNotFound)
	}
	return nil
}

func toGPUPolicy(r db.GpuPolicy) (catalog.GPUPolicy, error) {
	var quotas []storedQuota
	if err := json.Unmarshal(r.Quotas, &quotas); err != nil {
		return catalog.GPUPolicy{}, fmt.Errorf("GPU policy of %q: stored quotas: %v", r.Project, err)
	}
	p := catalog.GPUPolicy{
		ProjectPolicy: gpu.ProjectPolicy{
			Name: r.Project, Cohort: r.Cohort, Weight: r.Weight,
			DefaultPriority: int(r.DefaultPriority), MinPriority: int(r.MinPriority), MaxPriority: int(r.MaxPriority),
			Quotas: make([]gpu.Quota, len(quotas)),
		},
		UpdatedAt: utc(r.UpdatedAt),
	}
	for i, q := range quotas {
		p.Quotas[i] = gpu.Quota{Resource: gpu.Resource(q.Resource), Nominal: q.Nominal, BorrowingLimit: gpu.Limit(q.BorrowingLimit), LendingLimit: gpu.Limit(q.LendingLimit)}
	}
	return p, nil
}
