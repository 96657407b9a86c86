package gpusynth

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/atelier-ml/atelier/gpu"
)

// GPU products and the MIG profile of the synthetic fleet.
const (
	A100 gpu.Resource = "NVIDIA-A100-SXM4-80GB"
	H100 gpu.Resource = "NVIDIA-H100-80GB-HBM3"
	L4   gpu.Resource = "NVIDIA-L4"
	MIG  gpu.Resource = "nvidia.com/mig-1g.10gb"
)

// Config sizes a synthetic snapshot.
type Config struct {
	Nodes    int // 1,000 in the benchmark
	Projects int // 100
	Cohorts  int // 4
	Pending  int // 10,000
	// Fill is the fraction of the fleet's GPUs Atelier's running
	// workloads hold before the cycle (0.85: a busy cluster).
	Fill float64
	Seed uint64
	Now  time.Time
}

// Default is the benchmark's configuration: 10,000 pending × 1,000 nodes.
func Default() Config {
	return Config{Nodes: 1000, Projects: 100, Cohorts: 4, Pending: 10000, Fill: 0.85, Seed: 1,
		Now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
}

// Fleet mix: 40% 8×A100, 30% 8×H100, 20% 4×L4, 10% A100 nodes split into
// 28 mig-1g.10gb slices (4 GPUs × 7); 3% of nodes tainted, 1% not ready.
func nodes(c Config, r *rand.Rand) []gpu.Node {
	out := make([]gpu.Node, c.Nodes)
	for i := range out {
		n := gpu.Node{Name: fmt.Sprintf("gpu-node-%04d", i), Ready: r.IntN(100) != 0}
		switch x := r.IntN(10); {
		case x < 4:
			n.GPUType, n.GPUMemoryMiB, n.GPUs = A100, 81920, 8
		case x < 7:
			n.GPUType, n.GPUMemoryMiB, n.GPUs = H100, 81920, 8
		case x < 9:
			n.GPUType, n.GPUMemoryMiB, n.GPUs = L4, 23034, 4
		default:
			n.GPUType, n.GPUMemoryMiB = A100, 81920
			n.MIG = []gpu.MIGSlices{{Profile: MIG, Allocatable: 28}}
		}
		if r.IntN(33) == 0 {
			n.Taints = []gpu.Taint{{Key: "dedicated", Value: "inference", Effect: gpu.NoSchedule}}
		}
		if r.IntN(20) == 0 && n.GPUs > 0 {
			n.GPUsInUse = 1 // a pod Atelier does not own
		}
		out[i] = n
	}
	return out
}

// gang draws a realistic gang: mostly single small pods, some full-node
// pods, a few multi-node training jobs.
func gang(r *rand.Rand) []gpu.PodSet {
	types := []gpu.Resource{A100, A100, H100, H100, L4}
	t := types[r.IntN(len(types))]
	switch x := r.IntN(100); {
	case x < 10:
		return []gpu.PodSet{{Name: "mig", Count: 1 + r.IntN(4), Per: 1, Resource: MIG}}
	case x < 55:
		return []gpu.PodSet{{Name: "main", Count: 1, Per: 1, Resource: t}}
	case x < 75:
		per := 2 + 2*r.IntN(2)
		if t == L4 {
			per = 2
		}
		return []gpu.PodSet{{Name: "main", Count: 1, Per: per, Resource: t}}
	case x < 88:
		if t == L4 {
			return []gpu.PodSet{{Name: "main", Count: 1, Per: 4, Resource: t}}
		}
		return []gpu.PodSet{{Name: "main", Count: 1, Per: 8, Resource: t}}
	case x < 97:
		if t == L4 {
			t = H100
		}
		return []gpu.PodSet{{Name: "head", Count: 1, Per: 1, Resource: L4}, {Name: "workers", Count: 2 + r.IntN(3), Per: 8, Resource: t}}
	default:
		if t == L4 {
			t = A100
		}
		return []gpu.PodSet{{Name: "workers", Count: 8 + r.IntN(9), Per: 8, Resource: t}}
	}
}

// Snapshot builds the snapshot: the fleet, a policy of Projects projects
// in Cohorts cohorts whose nominal quotas add up to the fleet (each lends
// everything and may borrow up to its nominal again), running workloads
// holding about Fill of the GPUs (admitted by gpu.Schedule itself, 20
// minutes to 12 hours ago), and Pending workloads submitted over the last
// 6 hours with priorities 0-10.
func Snapshot(c Config) gpu.Snapshot {
	r := rand.New(rand.NewPCG(c.Seed, 0x9e3779b97f4a7c15))
	s := gpu.Snapshot{Now: c.Now, Inventory: gpu.Inventory{Nodes: nodes(c, r)}}
	capacity := map[gpu.Resource]int{}
	for _, n := range s.Inventory.Nodes {
		capacity[n.GPUType] += n.GPUs
		for _, m := range n.MIG {
			capacity[m.Profile] += m.Allocatable
		}
	}
	for i := range c.Projects {
		p := gpu.ProjectPolicy{Name: fmt.Sprintf("project-%03d", i), Cohort: fmt.Sprintf("cohort-%d", i%max(1, c.Cohorts)),
			Weight: float64(1 + r.IntN(3)), DefaultPriority: 3, MinPriority: 0, MaxPriority: 10}
		for _, res := range []gpu.Resource{A100, H100, L4, MIG} {
			nominal := capacity[res] / c.Projects
			p.Quotas = append(p.Quotas, gpu.Quota{Resource: res, Nominal: nominal,
				BorrowingLimit: gpu.Limit(nominal), LendingLimit: gpu.Unlimited})
		}
		s.Policy.Projects = append(s.Policy.Projects, p)
	}
	total := 0
	for _, v := range capacity {
		total += v
	}
	id := 0
	workload := func(ago time.Duration) gpu.Workload {
		id++
		w := gpu.Workload{ID: fmt.Sprintf("wl-%06d", id), Project: s.Policy.Projects[r.IntN(c.Projects)].Name,
			Submitted: c.Now.Add(-time.Duration(r.Int64N(int64(ago)))), PodSets: gang(r)}
		if r.IntN(3) == 0 {
			p := r.IntN(11)
			w.Priority = &p
		}
		return w
	}
	// Fill: let the scheduler admit a backlog on the empty fleet, in
	// rounds, until Fill of the capacity is held.
	held := 0
	for round := 0; held < int(c.Fill*float64(total)) && round < 50; round++ {
		fill := gpu.Snapshot{Now: c.Now.Add(-20 * time.Minute), Inventory: s.Inventory, Policy: s.Policy, Running: s.Running}
		for range 500 {
			fill.Pending = append(fill.Pending, workload(12*time.Hour))
		}
		plan := gpu.Schedule(fill)
		byID := map[string]*gpu.Workload{}
		for i := range fill.Pending {
			byID[fill.Pending[i].ID] = &fill.Pending[i]
		}
		for _, a := range plan.Admissions {
			if held >= int(c.Fill*float64(total)) {
				break
			}
			w := byID[a.Workload]
			admitted := c.Now.Add(-20*time.Minute - time.Duration(r.Int64N(int64(11*time.Hour))))
			if admitted.Before(w.Submitted) {
				w.Submitted = admitted
			}
			s.Running = append(s.Running, gpu.Running{Workload: *w, Admitted: admitted, Placement: a.Placement, Borrowed: len(a.Borrowed) > 0})
			for _, ps := range w.PodSets {
				held += ps.Count * ps.Per
			}
		}
		if len(plan.Admissions) == 0 {
			break
		}
	}
	for range c.Pending {
		s.Pending = append(s.Pending, workload(6*time.Hour))
	}
	return s
}
