package pipeline

import (
	"os"
	"slices"
	"testing"

	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

func TestDeciderRoles(t *testing.T) {
	for _, tc := range []struct {
		a    *ApprovalStep
		want []string
	}{
		{nil, []string{"editor", "admin"}},
		{&ApprovalStep{}, []string{"editor", "admin"}},
		{&ApprovalStep{MinRole: "viewer"}, []string{"viewer", "editor", "admin"}},
		{&ApprovalStep{MinRole: "admin"}, []string{"admin"}},
		{&ApprovalStep{Approvers: []string{"viewer", "admin"}}, []string{"viewer", "admin"}},
	} {
		if got := tc.a.DeciderRoles(); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.a, got, tc.want)
		}
	}
	if tokens.Rank("admin") <= tokens.Rank("editor") || tokens.Rank("editor") <= tokens.Rank("viewer") || tokens.Rank("owner") != 0 {
		t.Error("roles are not ranked admin > editor > viewer > unknown")
	}
}

// TestApproveDeployExample keeps examples/pipelines/approve-deploy.yaml
// valid for the local runtime.
func TestApproveDeployExample(t *testing.T) {
	data, err := os.ReadFile("../examples/pipelines/approve-deploy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(p, ValidateOptions{Kinds: []StepKind{KindContainer}}); err != nil {
		t.Fatal(err)
	}
}
