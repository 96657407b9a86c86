package store_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

func TestGPUPolicies(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	for _, p := range []string{"vision", "nlp"} {
		if _, err := s.CreateProject(ctx, catalog.Project{Name: p}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.GetGPUPolicy(ctx, "vision"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("no policy yet: err = %v, want ErrNotFound", err)
	}
	want := catalog.GPUPolicy{ProjectPolicy: gpu.ProjectPolicy{
		Name: "vision", Cohort: "research", Weight: 2, DefaultPriority: 10, MinPriority: 0, MaxPriority: 100,
		Quotas: []gpu.Quota{
			{Resource: "NVIDIA-H100-80GB-HBM3", Nominal: 16, BorrowingLimit: 8, LendingLimit: gpu.Unlimited},
			{Resource: "nvidia.com/mig-1g.10gb", Nominal: 7, BorrowingLimit: gpu.Unlimited, LendingLimit: 3},
		},
	}}
	ignoreTime := cmpopts.IgnoreFields(catalog.GPUPolicy{}, "UpdatedAt")
	got, err := s.PutGPUPolicy(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, ignoreTime); diff != "" || got.UpdatedAt.IsZero() {
		t.Fatalf("put (-want +got):\n%s", diff)
	}
	// Replaced whole: the quotas are the new ones only.
	want.Quotas = want.Quotas[:1]
	want.Weight = 1
	if _, err := s.PutGPUPolicy(ctx, want); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutGPUPolicy(ctx, catalog.GPUPolicy{ProjectPolicy: gpu.ProjectPolicy{Name: "nlp"}}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListGPUPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantList := []catalog.GPUPolicy{{ProjectPolicy: gpu.ProjectPolicy{Name: "nlp", Quotas: []gpu.Quota{}}}, want}
	if diff := cmp.Diff(wantList, list, ignoreTime); diff != "" {
		t.Fatalf("list (-want +got):\n%s", diff)
	}
	// A policy for a project that does not exist is refused.
	if _, err := s.PutGPUPolicy(ctx, catalog.GPUPolicy{ProjectPolicy: gpu.ProjectPolicy{Name: "ghost"}}); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("policy of a missing project: err = %v, want ErrNotFound", err)
	}
	if err := s.DeleteGPUPolicy(ctx, "nlp"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteGPUPolicy(ctx, "nlp"); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("second delete: err = %v, want ErrNotFound", err)
	}
}

func TestEndedRuns(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	if _, err := s.CreateProject(ctx, catalog.Project{Name: "p1"}); err != nil {
		t.Fatal(err)
	}
	for id, state := range map[string]runstate.State{"running": runstate.Running, "done": runstate.Succeeded, "killed": runstate.Terminated, "stopping": runstate.Cancelling} {
		if _, _, err := s.CreateRun(ctx, catalog.Run{ID: id, Project: "p1", Workflow: "w"}); err != nil {
			t.Fatal(err)
		}
		if err := s.MirrorRun(ctx, runstate.Status{RunID: id, Project: "p1", State: state, Seq: 1}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.EndedRuns(ctx, []string{"running", "done", "killed", "stopping", "unknown"})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"done", "killed"}, got); diff != "" {
		t.Errorf("ended runs (-want +got):\n%s", diff)
	}
	if got, err := s.EndedRuns(ctx, nil); err != nil || got != nil {
		t.Errorf("no ids: %v %v", got, err)
	}
}
