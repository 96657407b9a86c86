package gpu

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/schema"
)

func TestProjectPolicyProblems(t *testing.T) {
	valid := ProjectPolicy{
		Name: "vision", Cohort: "research", Weight: 2, DefaultPriority: 10, MinPriority: 0, MaxPriority: 100,
		Quotas: []Quota{
			{Resource: "NVIDIA-H100-80GB-HBM3", Nominal: 16, BorrowingLimit: 8, LendingLimit: Unlimited},
			{Resource: "nvidia.com/mig-1g.10gb", Nominal: 7, BorrowingLimit: Unlimited, LendingLimit: 3},
		},
	}
	if got := valid.Problems(); got != nil {
		t.Fatalf("valid policy: %v", got)
	}
	bad := ProjectPolicy{
		Cohort: "Research!", Weight: math.NaN(), DefaultPriority: 200, MinPriority: 0, MaxPriority: 100,
		Quotas: []Quota{
			{Resource: "", Nominal: -1, BorrowingLimit: -2},
			{Resource: "NVIDIA-L4", Nominal: 2, LendingLimit: 3},
			{Resource: "NVIDIA-L4", Nominal: 2},
		},
	}
	want := []schema.Problem{
		{Path: "cohort", Message: "must be a lowercase name of at most 63 characters (letters, digits, '-')"},
		{Path: "weight", Message: "must be between 0 and 1000 (0 means 1)"},
		{Path: "defaultPriority", Message: "must lie in [minPriority, maxPriority] = [0, 100]"},
		{Path: "quotas[0].resource", Message: "required: a GPU product (as in the node label nvidia.com/gpu.product) or a MIG resource (nvidia.com/mig-<profile>)"},
		{Path: "quotas[0].nominal", Message: "must be between 0 and 1048576"},
		{Path: "quotas[0].borrowingLimit", Message: "must be -1 (unlimited) or between 0 and 1048576"},
		{Path: "quotas[1].lendingLimit", Message: "cannot lend more than the nominal quota (2); -1 lends all of it"},
		{Path: "quotas[2].resource", Message: `"NVIDIA-L4" already has a quota at quotas[1]`},
	}
	if diff := cmp.Diff(want, bad.Problems()); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}
