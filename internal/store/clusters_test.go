package store_test

import (
	"testing"
	"time"

	"github.com/atelier-ml/atelier/internal/catalog"
)

func TestClusters(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()

	if list, err := s.ListClusters(ctx); err != nil || len(list) != 0 {
		t.Fatalf("empty registry: %v %v", list, err)
	}

	// A worker registers first, without labels.
	c, created, err := s.UpsertCluster(ctx, catalog.Cluster{Name: "gpu-east", TaskQueue: "atelier-k8s-gpu-east"})
	if err != nil || !created {
		t.Fatalf("register: created=%v err=%v", created, err)
	}
	if c.Labels == nil || len(c.Labels) != 0 || c.LastSeenAt != nil || c.Capacity != nil || c.CreatedAt.IsZero() || c.CreatedAt.Location() != time.UTC {
		t.Fatalf("new cluster %+v", c)
	}

	// An admin sets description and labels.
	c, created, err = s.UpsertCluster(ctx, catalog.Cluster{Name: "gpu-east", Description: "A100s", Labels: map[string]string{"region": "east", "tier": "gpu"}, TaskQueue: "atelier-k8s-gpu-east"})
	if err != nil || created {
		t.Fatalf("update: created=%v err=%v", created, err)
	}
	if c.Description != "A100s" || c.Labels["region"] != "east" || len(c.Labels) != 2 || c.UpdatedAt.Before(c.CreatedAt) {
		t.Fatalf("updated %+v", c)
	}

	// The worker restarts: nil labels and empty description keep them.
	c, _, err = s.UpsertCluster(ctx, catalog.Cluster{Name: "gpu-east", TaskQueue: "atelier-k8s-gpu-east"})
	if err != nil || c.Description != "A100s" || len(c.Labels) != 2 {
		t.Fatalf("re-register kept nothing: %+v %v", c, err)
	}
	// Empty non-nil labels clear them.
	if c, _, err = s.UpsertCluster(ctx, catalog.Cluster{Name: "gpu-east", Labels: map[string]string{}, TaskQueue: "atelier-k8s-gpu-east"}); err != nil || len(c.Labels) != 0 {
		t.Fatalf("clear labels: %+v %v", c, err)
	}

	// Capacity reports.
	capA := catalog.ClusterCapacity{
		GPUs:        map[string]catalog.ResourceAmount{"NVIDIA-A100-SXM4-80GB": {Total: 16, Free: 6}},
		CPUMillis:   catalog.ResourceAmount{Total: 256000, Free: 100000},
		MemoryBytes: catalog.ResourceAmount{Total: 1 << 40, Free: 1 << 39},
		Nodes:       2,
	}
	seen := time.Date(2025, 6, 1, 12, 0, 0, 0, time.FixedZone("CEST", 7200))
	if err := s.ReportClusterCapacity(ctx, "gpu-east", capA, seen); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetCluster(ctx, "gpu-east")
	if err != nil {
		t.Fatal(err)
	}
	if got.LastSeenAt == nil || !got.LastSeenAt.Equal(seen) || got.LastSeenAt.Location() != time.UTC {
		t.Fatalf("last seen %v", got.LastSeenAt)
	}
	if got.Capacity == nil || got.Capacity.GPUs["NVIDIA-A100-SXM4-80GB"].Free != 6 || got.Capacity.CPUMillis.Total != 256000 || got.Capacity.MemoryBytes.Free != 1<<39 || got.Capacity.Nodes != 2 {
		t.Fatalf("capacity %+v", got.Capacity)
	}
	// A stale report is ignored without error.
	capB := capA
	capB.Nodes = 99
	if err := s.ReportClusterCapacity(ctx, "gpu-east", capB, seen.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, _ = s.GetCluster(ctx, "gpu-east"); got.Capacity.Nodes != 2 || !got.LastSeenAt.Equal(seen) {
		t.Fatalf("stale report applied: %+v at %v", got.Capacity, got.LastSeenAt)
	}
	// Re-registration leaves capacity alone.
	if c, _, err = s.UpsertCluster(ctx, catalog.Cluster{Name: "gpu-east", TaskQueue: "atelier-k8s-gpu-east"}); err != nil || c.Capacity == nil || c.LastSeenAt == nil {
		t.Fatalf("re-register lost capacity: %+v %v", c, err)
	}
	wantErr(t, s.ReportClusterCapacity(ctx, "nope", capA, seen), catalog.ErrNotFound)

	if _, _, err := s.UpsertCluster(ctx, catalog.Cluster{Name: "cpu", TaskQueue: "atelier-k8s-cpu", Labels: map[string]string{"tier": "cpu"}}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListClusters(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "cpu" || list[1].Name != "gpu-east" || list[0].Labels["tier"] != "cpu" {
		t.Fatalf("list %+v %v", list, err)
	}

	// Invalid input.
	for _, bad := range []catalog.Cluster{
		{Name: "", TaskQueue: "q"}, {Name: "Upper", TaskQueue: "q"}, {Name: "-x", TaskQueue: "q"}, {Name: "ok"},
	} {
		_, _, err := s.UpsertCluster(ctx, bad)
		wantErr(t, err, catalog.ErrInvalidArgument)
	}

	// Delete.
	if err := s.DeleteCluster(ctx, "cpu"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.DeleteCluster(ctx, "cpu"), catalog.ErrNotFound)
	_, err = s.GetCluster(ctx, "cpu")
	wantErr(t, err, catalog.ErrNotFound)
}
