package gpu

import (
	"fmt"
	"time"
)

const (
	a100 Resource = "NVIDIA-A100-SXM4-80GB"
	h100 Resource = "NVIDIA-H100-80GB-HBM3"
	mig1 Resource = "nvidia.com/mig-1g.10gb"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func at(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }

func gpuNode(name string, typ Resource, gpus int) Node {
	return Node{Name: name, GPUType: typ, GPUMemoryMiB: 81920, GPUs: gpus, Ready: true}
}

func prio(p int) *int { return &p }

// wl is a workload of one pod set.
func wl(id, project string, submitted time.Time, count, per int, r Resource) Workload {
	return Workload{ID: id, Project: project, Submitted: submitted,
		PodSets: []PodSet{{Name: "workers", Count: count, Per: per, Resource: r}}}
}

func withPrio(w Workload, p int) Workload { w.Priority = prio(p); return w }

func running(w Workload, admitted time.Time, place ...any) Running {
	r := Running{Workload: w, Admitted: admitted}
	for i := 0; i+1 < len(place); i += 2 {
		r.Placement = append(r.Placement, Assignment{PodSet: 0, Node: place[i].(string), Pods: place[i+1].(int)})
	}
	return r
}

func project(name string, quotas ...Quota) ProjectPolicy {
	return ProjectPolicy{Name: name, Weight: 1, MinPriority: 0, MaxPriority: 100, Quotas: quotas}
}

func quota(r Resource, nominal int, borrow, lend Limit) Quota {
	return Quota{Resource: r, Nominal: nominal, BorrowingLimit: borrow, LendingLimit: lend}
}

func nodes(prefix string, n int, typ Resource, gpus int) []Node {
	out := make([]Node, n)
	for i := range n {
		out[i] = gpuNode(fmt.Sprintf("%s-%02d", prefix, i), typ, gpus)
	}
	return out
}
