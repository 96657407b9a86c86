package layers

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/atelier-ml/atelier"

// root is the module's root folder.
func root(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = parent
	}
}

// goList runs go list in the module root with a template, one line per
// package.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func rel(path string) string {
	if path == module {
		return ""
	}
	return strings.TrimPrefix(path, module+"/")
}

// TestArrowsPointDown checks every import between the module's packages
// (test files aside: a test may reach up to drive what it tests).
func TestArrowsPointDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the whole module")
	}
	n := 0
	for _, line := range goList(t, "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...") {
		f := strings.Fields(line)
		from := rel(f[0])
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			n++
			if msg := Check(from, rel(imp)); msg != "" {
				t.Error(msg)
			}
		}
	}
	if n < 100 {
		t.Fatalf("only %d imports between the module's packages: go list did not see the module", n)
	}
}

// TestStoreAndCatalogStayOffTheEngine is the rule that mattered most: the
// catalogue's records and the Postgres store depend neither on workflow
// code nor on Temporal's workflow SDK, even through other packages.
func TestStoreAndCatalogStayOffTheEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the whole module")
	}
	for _, pkg := range []string{"./internal/catalog", "./internal/store", "./runstate", "./pipeline", "./activities"} {
		for _, dep := range goList(t, "-deps", pkg) {
			if dep == "go.temporal.io/sdk/workflow" || dep == module+"/workflows" || strings.HasPrefix(dep, module+"/workflows/") {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{"workflows", "runstate", true},
		{"workflows", "activities", true},
		{"workflows/admission", "gpu", true},
		{"workflows", "activities/local", false},
		{"workflows", "internal/store", false},
		{"activities/foreach", "workflows", false},
		{"internal/catalog", "workflows", false},
		{"internal/store", "activities", true},
		{"runstate", "activities", false},
		{"pipeline", "internal/platform/tokens", true},
		{"gpu", "internal/catalog", false},
		{"api", "workflows", true},
		{"wire", "examples/gopipeline", false},
		{"cmd/atelier", "examples/gopipeline", true},
		{"internal/process/app", "internal/stack/devstack", true},
		{"api", "internal/stack/devstack", false},
		// Test harnesses (kubetest, temporaltest, s3test) stand beside the
		// floors: they may use the dev stack, and only tests use them.
		{"internal/stack/s3test", "internal/stack/devstack", true},
		{"internal/store", "internal/stack/s3test", false},
		{"newfolder", "runstate", false},
	} {
		if got := Check(c.from, c.to) == ""; got != c.ok {
			t.Errorf("Check(%q, %q) allowed=%v, want %v (%s)", c.from, c.to, got, c.ok, Check(c.from, c.to))
		}
	}
}
