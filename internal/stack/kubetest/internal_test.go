package kubetest

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The Go side looks binaries up by KubeVersion; build.sh names the directory
// after tools/kube/go.mod. If they disagree, every run would rebuild.
func TestKubeVersionMatchesToolsModule(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(root + "/tools/kube/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("tools/kube/go.mod does not require k8s.io/kubernetes")
	}
	if got := string(m[1]); got != KubeVersion {
		t.Errorf("tools/kube/go.mod pins k8s.io/kubernetes %s, KubeVersion is %s", got, KubeVersion)
	}
}

// Likewise for kwok, the KubeRay operator and containerd, each in its own
// tools module.
func TestToolVersionsMatchToolsModules(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, module, want string }{
		{"tools/kube/kwok/go.mod", `sigs\.k8s\.io/kwok`, KwokVersion},
		{"tools/kube/kuberay/go.mod", `github\.com/ray-project/kuberay/ray-operator`, KubeRayOperatorVersion},
		{"tools/kube/containerd/go.mod", `github\.com/containerd/containerd/v2`, ContainerdVersion},
	} {
		b, err := os.ReadFile(root + "/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + tc.module + `\s+(v\S+)`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s does not require %s", tc.file, tc.module)
		}
		if got := string(m[1]); got != tc.want {
			t.Errorf("%s pins %s, the Go side looks for %s", tc.file, got, tc.want)
		}
	}
}

func TestNamespacePrefix(t *testing.T) {
	for _, name := range []string{
		"TestX",
		"TestRayJob/sub_test#01",
		"Test" + strings.Repeat("VeryLong", 20),
		"Test/--/",
	} {
		p := namespacePrefix(name)
		full := p + "abcde" // what generateName appends
		if errs := validation.IsDNS1123Label(full); len(errs) > 0 {
			t.Errorf("%q -> %q: %v", name, full, errs)
		}
	}
	if got := namespacePrefix("TestRayJob/wrong_type"); got != "t-testrayjob-wrong-type-" {
		t.Errorf("prefix = %q", got)
	}
}
