package helm

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/atelier-ml/atelier/internal/stack/devstack"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
	"github.com/atelier-ml/atelier/pipeline"
)

const (
	chartDir     = "atelier"
	release      = "atelier"
	multicluster = "atelier/values-multicluster.yaml"
	// existing is the Secret the tests name with --set existingSecret.
	existing = "atelier-db"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// helm returns the pinned helm binary. Under -short the chart tests skip:
// the first build of helm takes minutes (`make ensure-helm` does it with
// progress before `go test`).
func helm(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the pinned helm binary (make ensure-helm builds it); skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// Progress straight to stderr: go test holds t.Logf back until the end,
	// and a silent build looks like a hang.
	bin, err := devstack.EnsureHelm(ctx, func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "chart test: "+format+"\n", args...)
	})
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// runHelm runs helm with its state directories in a temp dir, so the test
// reads no repositories or plugins of the user's.
func runHelm(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"),
	)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// render runs `helm template` and decodes every rendered document.
func render(t *testing.T, namespace string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, stderr, err := runHelm(t, append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, stderr)
	}
	objs := decode(t, out)
	if len(objs) == 0 {
		t.Fatalf("helm template %v rendered nothing", args)
	}
	return objs
}

func decode(t *testing.T, out string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for i, doc := range docSep.Split(out, -1) {
		var m map[string]any
		if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
			t.Fatalf("document %d does not parse: %v\n%s", i, err, doc)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			t.Fatalf("document %d has no apiVersion, kind or name:\n%s", i, doc)
		}
		objs = append(objs, u)
	}
	return objs
}

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return out
}

func deployments(t *testing.T, objs []*unstructured.Unstructured) map[string]*appsv1.Deployment {
	t.Helper()
	out := map[string]*appsv1.Deployment{}
	for _, u := range ofKind(objs, "Deployment") {
		out[u.GetName()] = typed[appsv1.Deployment](t, u)
	}
	return out
}

func kinds(objs []*unstructured.Unstructured) map[string]int {
	out := map[string]int{}
	for _, o := range objs {
		out[o.GetKind()]++
	}
	return out
}

func TestLint(t *testing.T) {
	helm(t) // skip under -short once, not per subtest
	for name, args := range map[string][]string{
		"defaults":     {"--set", "existingSecret=" + existing},
		"multicluster": {"-f", multicluster},
		"chart secret": {"--set", "secret.databaseURL=postgres://a@db/atelier"},
	} {
		t.Run(name, func(t *testing.T) {
			out, stderr, err := runHelm(t, append([]string{"lint", "--strict", chartDir}, args...)...)
			if err != nil {
				t.Fatalf("helm lint --strict %v: %v\n%s%s", args, err, out, stderr)
			}
		})
	}
}

// TestDefaults renders the default values (plus the one required setting,
// the database Secret) and checks what every object says.
func TestDefaults(t *testing.T) {
	objs := render(t, "atelier", "--set", "existingSecret="+existing)
	want := map[string]int{"Deployment": 2, "Service": 1, "ServiceAccount": 1, "Pod": 1}
	if got := kinds(objs); !maps.Equal(got, want) {
		t.Errorf("kinds %v, want %v (no Secret: it exists; no RBAC and no ServiceMonitor by default; the Pod is helm test's)", got, want)
	}
	// helm test's Pod pings the gateway through its Service's variables
	// (no cluster DNS needed).
	probe := typed[corev1.Pod](t, ofKind(objs, "Pod")[0])
	if probe.Annotations["helm.sh/hook"] != "test" || !slices.Equal(probe.Spec.Containers[0].Args,
		[]string{"ping", "http://$(ATELIER_GATEWAY_SERVICE_HOST):$(ATELIER_GATEWAY_SERVICE_PORT)", "--wait", "60s"}) {
		t.Errorf("test pod %+v", probe)
	}
	checkEveryObject(t, objs, "atelier")
	deps := deployments(t, objs)
	gw, worker := deps["atelier-gateway"], deps["atelier-worker"]
	if gw == nil || worker == nil {
		t.Fatalf("deployments %v, want atelier-gateway and atelier-worker", keys(deps))
	}

	c := gw.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Args, []string{"gateway"}) {
		t.Errorf("gateway args %v", c.Args)
	}
	env := envOf(c)
	if env["ATELIER_LISTEN"] != ":8080" || len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("gateway listens on %q, ports %+v; want :8080", env["ATELIER_LISTEN"], c.Ports)
	}
	for probe, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		want := map[string]string{"liveness": "/healthz", "readiness": "/readyz", "startup": "/healthz"}[probe]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "http" {
			t.Errorf("gateway %s probe %+v, want GET %s on port http", probe, p, want)
		}
	}
	svc := typed[corev1.Service](t, ofKind(objs, "Service")[0])
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Ports[0].TargetPort.String() != "http" ||
		svc.Spec.Selector["app.kubernetes.io/component"] != "gateway" {
		t.Errorf("service %+v", svc.Spec)
	}
	for k, v := range svc.Spec.Selector {
		if gw.Spec.Template.Labels[k] != v {
			t.Errorf("service selects %s=%s, gateway pods have %q", k, v, gw.Spec.Template.Labels[k])
		}
	}

	w := worker.Spec.Template.Spec.Containers[0]
	if !slices.Equal(w.Args, []string{"worker"}) || envOf(w)["ATELIER_CLUSTER"] != "" {
		t.Errorf("local worker args %v env %v", w.Args, envOf(w))
	}
	if dir := envOf(w)["ATELIER_DATA_DIR"]; !mountedWritable(worker, w, dir) {
		t.Errorf("data dir %q is not on a mounted volume (the root filesystem is read-only)", dir)
	}
	// Workers serve their metrics on metrics.workerPort.
	if envOf(w)["ATELIER_METRICS_ADDR"] != ":9090" || len(w.Ports) != 1 || w.Ports[0].Name != "metrics" || w.Ports[0].ContainerPort != 9090 {
		t.Errorf("worker metrics: env %q, ports %+v; want :9090 on port metrics", envOf(w)["ATELIER_METRICS_ADDR"], w.Ports)
	}
	for _, d := range deps {
		if d.Spec.Template.Spec.AutomountServiceAccountToken == nil || *d.Spec.Template.Spec.AutomountServiceAccountToken {
			t.Errorf("%s mounts a service account token; it calls no Kubernetes API", d.Name)
		}
	}
}

// TestMulticluster renders values-multicluster.yaml: the gateway, the
// local worker, two cluster workers, their RBAC and a ServiceMonitor.
func TestMulticluster(t *testing.T) {
	objs := render(t, "atelier", "-f", multicluster)
	want := map[string]int{"Deployment": 4, "Service": 1, "ServiceAccount": 2, "ClusterRole": 1,
		"ClusterRoleBinding": 1, "ServiceMonitor": 1, "ConfigMap": 1, "Pod": 1}
	if got := kinds(objs); !maps.Equal(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
	checkEveryObject(t, objs, "atelier")

	deps := deployments(t, objs)
	clusters := map[string]*appsv1.Deployment{}
	for _, d := range deps {
		if d.Labels["app.kubernetes.io/component"] != "cluster-worker" {
			continue
		}
		c := d.Spec.Template.Spec.Containers[0]
		name := envOf(c)["ATELIER_CLUSTER"]
		if !slices.Equal(c.Args, []string{"worker"}) || name == "" {
			t.Errorf("%s: args %v, ATELIER_CLUSTER %q", d.Name, c.Args, name)
		}
		if clusters[name] != nil {
			t.Errorf("two Deployments for cluster %s", name)
		}
		clusters[name] = d
	}
	if got := keys(clusters); !slices.Equal(got, []string{"gpu-east", "gpu-west"}) {
		t.Fatalf("cluster workers for %v, want gpu-east and gpu-west (one Deployment each)", got)
	}
	east, west := clusters["gpu-east"], clusters["gpu-west"]
	eastEnv, westEnv := envOf(east.Spec.Template.Spec.Containers[0]), envOf(west.Spec.Template.Spec.Containers[0])
	if eastEnv["ATELIER_CLUSTER_LABELS"] != "gpu=a100,region=us-east" || eastEnv["ATELIER_GATEWAY"] != "gateway-system/inference" ||
		eastEnv["ATELIER_KUBE_NAMESPACE_TEMPLATE"] != "atelier-{project}" || eastEnv["ATELIER_KUBECONFIG"] != "" {
		t.Errorf("gpu-east env %v", eastEnv)
	}
	if westEnv["ATELIER_KUEUE_QUEUE"] != "atelier" || *west.Spec.Replicas != 2 ||
		west.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String() != "500m" {
		t.Errorf("gpu-west: per-entry values not applied: env %v replicas %d", westEnv, *west.Spec.Replicas)
	}
	if !mountedReadOnly(west, west.Spec.Template.Spec.Containers[0], westEnv["ATELIER_KUBECONFIG"], "atelier-kubeconfig-west") {
		t.Errorf("gpu-west: ATELIER_KUBECONFIG %q is not the mounted Secret atelier-kubeconfig-west", westEnv["ATELIER_KUBECONFIG"])
	}

	// gpu-west's pod policy and defaults: the worker reads the file the
	// chart wrote, strictly, as the worker itself parses it.
	if westEnv["ATELIER_POD_SERVICE_ACCOUNTS"] != "trainer" || eastEnv["ATELIER_POD_SERVICE_ACCOUNTS"] != "" || eastEnv["ATELIER_POD_DEFAULTS"] != "" {
		t.Errorf("pod policy env: west %v, east %v", westEnv, eastEnv)
	}
	cm := typed[corev1.ConfigMap](t, ofKind(objs, "ConfigMap")[0])
	if !mountedConfigMap(west, westEnv["ATELIER_POD_DEFAULTS"], cm.Name) {
		t.Errorf("gpu-west: ATELIER_POD_DEFAULTS %q is not the mounted ConfigMap %s", westEnv["ATELIER_POD_DEFAULTS"], cm.Name)
	}
	defaults, err := pipeline.ParsePodDefaults([]byte(cm.Data["pod-defaults.yaml"]))
	if err != nil || defaults.PriorityClassName != "atelier-batch" || len(defaults.Tolerations) != 1 {
		t.Errorf("the chart's pod defaults do not parse as the worker parses them: %+v, %v", defaults, err)
	}
	if west.Spec.Template.Annotations["checksum/pod-defaults"] == "" {
		t.Error("gpu-west: a change of its pod defaults would not restart the worker")
	}

	// The in-cluster worker runs as the ServiceAccount the ClusterRole is
	// bound to, with its token mounted.
	sa := east.Spec.Template.Spec.ServiceAccountName
	if a := east.Spec.Template.Spec.AutomountServiceAccountToken; a != nil && !*a {
		t.Errorf("gpu-east does not mount its service account token")
	}
	role := typed[rbacv1.ClusterRole](t, ofKind(objs, "ClusterRole")[0])
	binding := typed[rbacv1.ClusterRoleBinding](t, ofKind(objs, "ClusterRoleBinding")[0])
	if binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Kind != "ServiceAccount" || binding.Subjects[0].Name != sa || binding.Subjects[0].Namespace != "atelier" {
		t.Errorf("binding %+v does not bind %s to atelier/%s", binding, role.Name, sa)
	}
	gwSA := deps["atelier-gateway"].Spec.Template.Spec.ServiceAccountName
	if gwSA == sa {
		t.Errorf("the gateway runs as the cluster workers' service account %s", sa)
	}

	// The ClusterRole's rules are deploy/kubernetes/rbac.yaml's, rule for
	// rule (that file's own test pins them to what the worker calls).
	if want := kustomizeRules(t); !equalRules(role.Rules, want) {
		t.Errorf("chart ClusterRole rules differ from deploy/kubernetes/rbac.yaml:\nchart: %+v\nkustomize: %+v", role.Rules, want)
	}

	sm := ofKind(objs, "ServiceMonitor")[0]
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if len(eps) != 1 || eps[0].(map[string]any)["path"] != "/metrics" || eps[0].(map[string]any)["port"] != "http" ||
		sel["app.kubernetes.io/component"] != "gateway" || sm.GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor %v", sm.Object)
	}
}

func TestChartMadeSecret(t *testing.T) {
	objs := render(t, "atelier", "--set", "secret.databaseURL=postgres://a:pw@db/atelier", "--set", "secret.temporal=t:7233")
	secrets := ofKind(objs, "Secret")
	if len(secrets) != 1 {
		t.Fatalf("%d Secrets, want the chart's one", len(secrets))
	}
	s := typed[corev1.Secret](t, secrets[0])
	if s.StringData["database-url"] != "postgres://a:pw@db/atelier" || s.StringData["temporal"] != "t:7233" {
		t.Errorf("secret data %v", s.StringData)
	}
	for _, d := range deployments(t, objs) {
		checkSecretRefs(t, d, s.Name)
	}
}

func TestRefusals(t *testing.T) {
	helm(t) // skip under -short once, not per subtest
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no database":         {nil, "set existingSecret"},
		"bad cluster name":    {[]string{"--set", "existingSecret=x", "--set", "clusterWorkers[0].name=East_1"}, `"East_1": use lowercase letters`},
		"cluster twice":       {[]string{"--set", "existingSecret=x", "--set", "clusterWorkers[0].name=a", "--set", "clusterWorkers[1].name=a"}, `"a" appears twice`},
		"cluster has no name": {[]string{"--set", "existingSecret=x", "--set", "clusterWorkers[0].replicas=2"}, "clusterWorkers[0].name is required"},
	} {
		t.Run(name, func(t *testing.T) {
			_, stderr, err := runHelm(t, append([]string{"template", release, chartDir}, tc.args...)...)
			if err == nil || !strings.Contains(stderr, tc.want) {
				t.Errorf("err %v, stderr %q; want a refusal saying %q", err, stderr, tc.want)
			}
		})
	}
}

// TestServerSideDryRun applies every object of both renderings with
// server-side apply and dryRun=All to a real kube-apiserver, which runs
// its defaulting, validation and admission on them and stores nothing.
//
// A bare API server (kubetest.Start) is enough: a dry run never reaches
// controllers, the scheduler or nodes.
func TestServerSideDryRun(t *testing.T) {
	helm(t) // skip under -short before starting a cluster
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	installServiceMonitorCRD(t, ctx, c)
	cfg := c.RESTConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))

	ns := c.Namespace(t) // dry runs of namespaced objects need the namespace
	for name, args := range map[string][]string{
		"defaults":     {"--set", "existingSecret=" + existing},
		"multicluster": {"-f", multicluster},
		"chart secret": {"--set", "secret.databaseURL=postgres://a@db/atelier"},
	} {
		t.Run(name, func(t *testing.T) {
			objs := render(t, ns, args...)
			for _, o := range objs {
				applied, err := dryRunApply(ctx, dyn, mapper, o)
				if err != nil {
					t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
					continue
				}
				if o.GetKind() == "Deployment" {
					// Server defaulting ran: the chart sets no strategy.
					if s, _, _ := unstructured.NestedString(applied.Object, "spec", "strategy", "type"); s != "RollingUpdate" {
						t.Errorf("%s: server-side defaults missing (strategy %q): not applied by the API server?", o.GetName(), s)
					}
				}
			}
		})
	}

	// Nothing was stored.
	list, err := c.Clientset().AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("dry runs stored %d deployments (err %v)", len(list.Items), err)
	}

	// The dry run does validate: a broken rendering is refused.
	objs := render(t, ns, "--set", "existingSecret="+existing, "--set", "gateway.service.port=99999")
	for _, o := range ofKind(objs, "Service") {
		if _, err := dryRunApply(ctx, dyn, mapper, o); !apierrors.IsInvalid(err) {
			t.Errorf("service with port 99999: err %v, want Invalid from the API server", err)
		}
	}
}

func dryRunApply(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	gvk := o.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", gvk, err)
	}
	var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		r = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
	}
	return r.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "atelier-chart-test", Force: true, DryRun: []string{metav1.DryRunAll}})
}

// installServiceMonitorCRD installs a schema-less stand-in for the
// Prometheus Operator's ServiceMonitor CRD (its module is not a dependency
// here): enough for the API server to accept the object's kind, group,
// version and scope; its spec is not validated.
func installServiceMonitorCRD(t *testing.T, ctx context.Context, c *kubetest.Cluster) {
	t.Helper()
	client, err := apiextensionsclient.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	preserve := true
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "servicemonitors.monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "servicemonitors", Singular: "servicemonitor", Kind: "ServiceMonitor", ListKind: "ServiceMonitorList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
			}},
		},
	}
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ServiceMonitor CRD not established: %v", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// checkEveryObject checks what every rendered object must have: the
// release namespace (namespaced kinds), the chart labels, and for every
// Deployment the hardened pod (checkHardened).
func checkEveryObject(t *testing.T, objs []*unstructured.Unstructured, ns string) {
	t.Helper()
	clusterScoped := map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true}
	for _, o := range objs {
		id := o.GetKind() + " " + o.GetName()
		if !clusterScoped[o.GetKind()] && o.GetNamespace() != ns {
			t.Errorf("%s is in namespace %q, want %q", id, o.GetNamespace(), ns)
		}
		l := o.GetLabels()
		if !strings.HasPrefix(l["helm.sh/chart"], "atelier-") || l["app.kubernetes.io/name"] != "atelier" ||
			l["app.kubernetes.io/instance"] != release || l["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("%s labels %v", id, l)
		}
	}
	for _, d := range deployments(t, objs) {
		if d.Labels["app.kubernetes.io/component"] == "" {
			t.Errorf("%s has no component label", d.Name)
		}
		checkHardened(t, d)
	}
}

func checkHardened(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	ps := d.Spec.Template.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod security context %+v", d.Name, ps)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: containers %d", d.Name, len(d.Spec.Template.Spec.Containers))
	}
	c := d.Spec.Template.Spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: container security context %+v", d.Name, sc)
	}
	if !mountedWritable(d, c, "/tmp") {
		t.Errorf("%s: no writable /tmp (the root filesystem is read-only)", d.Name)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: resources %+v", d.Name, c.Resources)
	}
	if c.Image != "ghcr.io/atelier-ml/atelier:0.1.0" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("%s: image %s (%s)", d.Name, c.Image, c.ImagePullPolicy)
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("%s: selector %s=%s does not match its pods", d.Name, k, v)
		}
	}
}

// checkSecretRefs checks that the connection settings come from secret.
func checkSecretRefs(t *testing.T, d *appsv1.Deployment, secret string) {
	t.Helper()
	refs := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			refs[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	if refs["ATELIER_DATABASE_URL"] != secret+"/database-url" || refs["ATELIER_TEMPORAL"] != secret+"/temporal" {
		t.Errorf("%s: secret env %v, want %s/database-url and %s/temporal", d.Name, refs, secret, secret)
	}
}

func TestExistingSecretIsReferenced(t *testing.T) {
	helm(t) // skip under -short once, not per subtest
	for name, tc := range map[string]struct {
		secret string
		args   []string
	}{
		"defaults":     {existing, []string{"--set", "existingSecret=" + existing}},
		"multicluster": {"atelier", []string{"-f", multicluster}},
	} {
		t.Run(name, func(t *testing.T) {
			objs := render(t, "atelier", tc.args...)
			if s := ofKind(objs, "Secret"); len(s) != 0 {
				t.Errorf("the chart made a Secret %s although existingSecret is set", s[0].GetName())
			}
			for _, d := range deployments(t, objs) {
				checkSecretRefs(t, d, tc.secret)
			}
		})
	}
}

func kustomizeRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	data, err := os.ReadFile("../kubernetes/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docSep.Split(string(data), -1) {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if u.GetKind() == "ClusterRole" {
			return typed[rbacv1.ClusterRole](t, &u).Rules
		}
	}
	t.Fatal("no ClusterRole in deploy/kubernetes/rbac.yaml")
	return nil
}

func equalRules(a, b []rbacv1.PolicyRule) bool {
	return slices.EqualFunc(a, b, func(x, y rbacv1.PolicyRule) bool {
		return slices.Equal(x.APIGroups, y.APIGroups) && slices.Equal(x.Resources, y.Resources) &&
			slices.Equal(x.Verbs, y.Verbs) && slices.Equal(x.ResourceNames, y.ResourceNames) &&
			slices.Equal(x.NonResourceURLs, y.NonResourceURLs)
	})
}

func envOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

// mountedWritable reports whether path is at or under a writable emptyDir
// mount of c.
func mountedWritable(d *appsv1.Deployment, c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.ReadOnly || (path != m.MountPath && !strings.HasPrefix(path, m.MountPath+"/")) {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.EmptyDir != nil {
				return true
			}
		}
	}
	return false
}

// mountedReadOnly reports whether path is a file of Secret secret mounted
// read-only in c.
func mountedReadOnly(d *appsv1.Deployment, c corev1.Container, path, secret string) bool {
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly || !strings.HasPrefix(path, m.MountPath+"/") {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == secret {
				return true
			}
		}
	}
	return false
}

// mountedConfigMap reports whether path is under a read-only mount of the
// ConfigMap named cm in d's first container.
func mountedConfigMap(d *appsv1.Deployment, path, cm string) bool {
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		if !m.ReadOnly || !strings.HasPrefix(path, m.MountPath+"/") {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm {
				return true
			}
		}
	}
	return false
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
