package kubernetes

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// manifests decodes every YAML document of every *.yaml file here.
func manifests(t *testing.T) map[string][]*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	out := map[string][]*unstructured.Unstructured{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSep.Split(string(data), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var u unstructured.Unstructured
			if err := yaml.UnmarshalStrict([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			if u.GetAPIVersion() == "" || u.GetKind() == "" {
				t.Fatalf("%s document %d has no apiVersion or kind", f, i)
			}
			out[u.GetKind()] = append(out[u.GetKind()], &u)
		}
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func one[T any](t *testing.T, m map[string][]*unstructured.Unstructured, kind string) *T {
	t.Helper()
	if len(m[kind]) != 1 {
		t.Fatalf("want exactly one %s, have %d", kind, len(m[kind]))
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(m[kind][0].Object, out, true); err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
	return out
}

func TestManifests(t *testing.T) {
	m := manifests(t)
	var kinds []string
	for k := range m {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	want := []string{"ClusterRole", "ClusterRoleBinding", "Deployment", "Kustomization", "Namespace", "ServiceAccount"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}

	// Every manifest file is in the kustomization.
	files, _ := filepath.Glob("*.yaml")
	var resources []string
	for _, r := range m["Kustomization"][0].Object["resources"].([]any) {
		resources = append(resources, r.(string))
	}
	for _, f := range files {
		if f != "kustomization.yaml" && !slices.Contains(resources, f) {
			t.Errorf("%s is not listed in kustomization.yaml", f)
		}
	}

	sa := m["ServiceAccount"][0]
	ns := m["Namespace"][0].GetName()
	if sa.GetNamespace() != ns {
		t.Errorf("service account in %q, namespace is %q", sa.GetNamespace(), ns)
	}

	binding := one[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding")
	role := one[rbacv1.ClusterRole](t, m, "ClusterRole")
	if binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != role.Name ||
		len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" ||
		binding.Subjects[0].Name != sa.GetName() || binding.Subjects[0].Namespace != ns {
		t.Errorf("binding %+v does not bind %s to %s/%s", binding, role.Name, ns, sa.GetName())
	}

	dep := one[appsv1.Deployment](t, m, "Deployment")
	if dep.Namespace != ns || dep.Spec.Template.Spec.ServiceAccountName != sa.GetName() {
		t.Errorf("deployment %s/%s runs as %q", dep.Namespace, dep.Name, dep.Spec.Template.Spec.ServiceAccountName)
	}
	if len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("containers %+v", dep.Spec.Template.Spec.Containers)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Args, []string{"worker"}) {
		t.Errorf("args %v", c.Args)
	}
	env := map[string]string{}
	secrets := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secrets[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	if secrets["ATELIER_DATABASE_URL"] != "atelier-worker/database-url" || secrets["ATELIER_TEMPORAL"] != "atelier-worker/temporal" {
		t.Errorf("secret env %v", secrets)
	}
	if _, ok := env["ATELIER_CLUSTER"]; !ok {
		t.Error("ATELIER_CLUSTER is not set")
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container security context %+v", sc)
	}
}

// TestRBACIsExactlyWhatTheWorkerUses pins the ClusterRole: widening it must
// be a deliberate change to this list (and to the backends that need it).
func TestRBACIsExactlyWhatTheWorkerUses(t *testing.T) {
	role := one[rbacv1.ClusterRole](t, manifests(t), "ClusterRole")
	got := map[string][]string{}
	for _, r := range role.Rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("unexpected rule shape %+v", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				key := g + "/" + res
				if _, dup := got[key]; dup {
					t.Errorf("%s appears in two rules", key)
				}
				verbs := slices.Clone(r.Verbs)
				slices.Sort(verbs)
				got[key] = verbs
			}
		}
	}
	crud := []string{"create", "delete", "get", "list", "watch"}
	longLived := []string{"create", "delete", "get", "list", "update"}
	want := map[string][]string{
		"/namespaces":                            {"create", "get"},
		"/nodes":                                 {"get", "list", "watch"},
		"/pods":                                  {"get", "list", "watch"},
		"/pods/log":                              {"get"},
		"batch/jobs":                             crud,
		"/secrets":                               {"create", "delete", "get", "update"},
		"ray.io/rayjobs":                         crud,
		"ray.io/rayclusters":                     crud,
		"sparkoperator.k8s.io/sparkapplications": crud,
		"kueue.x-k8s.io/workloads":               {"get", "list"},
		"apps/deployments":                       longLived,
		"/services":                              longLived,
		"gateway.networking.k8s.io/httproutes":   longLived,
	}
	if len(got) != len(want) {
		t.Errorf("rules cover %d resources, want %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("%s: verbs %v, want %v", k, got[k], v)
		}
	}
}
