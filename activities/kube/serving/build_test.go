package serving

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/schema"
)

const h100 = "NVIDIA-H100-80GB-HBM3"

func vllmSpec() inference.EndpointSpec {
	return inference.WithDefaults(inference.EndpointSpec{
		Backend: inference.BackendVLLM,
		Model:   inference.Model{URI: "s3://models/llama-3.1-8b", Name: "llama"},
		Image:   "vllm/vllm-openai:v0.9.1",
		Args:    []string{"--max-model-len=8192"},
		Env:     []inference.EnvVar{{Name: "HF_HOME", Value: "/cache"}, {Name: "B", Value: "$(HF_HOME)/b"}},
		Resources: inference.Resources{
			GPUType: h100, GPUs: 2, CPU: "8", Memory: "64Gi",
		},
	})
}

func tritonSpec() inference.EndpointSpec {
	return inference.WithDefaults(inference.EndpointSpec{
		Backend: inference.BackendTriton,
		Model:   inference.Model{URI: "s3://models", Name: "resnet"},
		Image:   "nvcr.io/nvidia/tritonserver:25.04-py3",
		Resources: inference.Resources{
			GPUType: "nvidia.com/mig-1g.10gb", GPUs: 1,
		},
	})
}

func TestNames(t *testing.T) {
	long := strings.Repeat("very-long-endpoint-name-", 5)
	for _, tc := range []struct {
		name, project, endpoint string
		revision                int
		wantRevPrefix           string
		wantEndpoint            string // "" = hashed
	}{
		{name: "plain", project: "p", endpoint: "llama", revision: 2, wantRevPrefix: "llama-r2-", wantEndpoint: "llama"},
		{name: "unsafe characters", project: "p", endpoint: "Llama_3.1", revision: 1, wantRevPrefix: "llama-3-1-r1-"},
		{name: "digit first", project: "p", endpoint: "8b", revision: 10, wantRevPrefix: "x8b-r10-"},
		{name: "too long", project: "p", endpoint: long, revision: 123, wantRevPrefix: "very-long-endpoint-name-very-long-endpoint-name-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev := RevisionName(tc.project, tc.endpoint, tc.revision)
			if errs := validation.IsDNS1035Label(rev); len(errs) > 0 {
				t.Errorf("RevisionName = %q: %v", rev, errs)
			}
			if !strings.HasPrefix(rev, tc.wantRevPrefix[:min(len(tc.wantRevPrefix), 20)]) || len(rev) > 63 {
				t.Errorf("RevisionName = %q, want prefix %q", rev, tc.wantRevPrefix)
			}
			if again := RevisionName(tc.project, tc.endpoint, tc.revision); again != rev {
				t.Errorf("RevisionName not deterministic: %q then %q", rev, again)
			}
			if other := RevisionName("q", tc.endpoint, tc.revision); other == rev {
				t.Errorf("another project's revision has the same name %q", rev)
			}
			ep := EndpointName(tc.project, tc.endpoint)
			if errs := validation.IsDNS1035Label(ep); len(errs) > 0 {
				t.Errorf("EndpointName = %q: %v", ep, errs)
			}
			if tc.wantEndpoint != "" && ep != tc.wantEndpoint {
				t.Errorf("EndpointName = %q, want %q", ep, tc.wantEndpoint)
			}
			if ep == rev {
				t.Errorf("endpoint and revision share the name %q", ep)
			}
		})
	}
	// Revision numbers cannot make names collide after truncation.
	if RevisionName("p", long, 1) == RevisionName("p", long, 11) {
		t.Error("revisions 1 and 11 of a long endpoint share a name")
	}
}

// podSummary is what the tests compare of a built pod template.
type podSummary struct {
	Args         []string
	Env          []corev1.EnvVar
	Ports        []corev1.ContainerPort
	Limits       corev1.ResourceList
	Requests     corev1.ResourceList
	NodeSelector map[string]string
	Readiness    string
	StartupMax   time.Duration
}

func summarize(d *appsv1.Deployment) podSummary {
	c := d.Spec.Template.Spec.Containers[0]
	return podSummary{
		Args: c.Args, Env: c.Env, Ports: c.Ports, Limits: c.Resources.Limits, Requests: c.Resources.Requests,
		NodeSelector: d.Spec.Template.Spec.NodeSelector,
		Readiness:    c.ReadinessProbe.HTTPGet.Path + " on " + c.ReadinessProbe.HTTPGet.Port.String(),
		StartupMax:   time.Duration(c.StartupProbe.PeriodSeconds*c.StartupProbe.FailureThreshold) * time.Second,
	}
}

func TestBuildDeployment(t *testing.T) {
	tcp := corev1.ProtocolTCP
	for _, tc := range []struct {
		name string
		spec inference.EndpointSpec
		want podSummary
	}{{
		name: "vllm on two H100s",
		spec: vllmSpec(),
		want: podSummary{
			Args:  []string{"--model", "s3://models/llama-3.1-8b", "--served-model-name", "llama", "--port", "8000", "--max-model-len=8192"},
			Env:   []corev1.EnvVar{{Name: "HF_HOME", Value: "/cache"}, {Name: "B", Value: "$(HF_HOME)/b"}},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000, Protocol: tcp}},
			Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2"),
				corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("64Gi")},
			Requests:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("64Gi")},
			NodeSelector: map[string]string{"nvidia.com/gpu.product": h100},
			Readiness:    "/v1/models on http",
			// 2 × the default EngineReady budget (30m).
			StartupMax: time.Hour,
		},
	}, {
		name: "triton on a MIG slice",
		spec: tritonSpec(),
		want: podSummary{
			Args: []string{"--model-repository=s3://models", "--model-control-mode=explicit", "--load-model=resnet"},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000, Protocol: tcp},
				{Name: "grpc", ContainerPort: 8001, Protocol: tcp}, {Name: "metrics", ContainerPort: 8002, Protocol: tcp}},
			Limits:     corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")},
			Readiness:  "/v2/health/ready on http",
			StartupMax: time.Hour,
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := buildDeployment("atelier-p", "p", "llama", 3, tc.spec, 2)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, summarize(d)); diff != "" {
				t.Errorf("pod template (-want +got):\n%s", diff)
			}
			wantLabels := map[string]string{
				framework.LabelManagedBy: framework.ManagedByValue, framework.LabelProject: "p",
				framework.LabelEndpoint: "llama", framework.LabelRevision: "3",
			}
			for what, got := range map[string]map[string]string{
				"labels": d.Labels, "selector": d.Spec.Selector.MatchLabels, "pod labels": d.Spec.Template.Labels,
			} {
				if diff := cmp.Diff(wantLabels, got); diff != "" {
					t.Errorf("%s (-want +got):\n%s", what, diff)
				}
			}
			if d.Name != RevisionName("p", "llama", 3) || d.Namespace != "atelier-p" || *d.Spec.Replicas != 2 {
				t.Errorf("deployment %s/%s replicas %d", d.Namespace, d.Name, *d.Spec.Replicas)
			}
			if !ptr.Equal(d.Spec.Template.Spec.EnableServiceLinks, ptr.To(false)) {
				t.Error("service links are on: a Service named vllm would set VLLM_PORT")
			}
		})
	}
	if _, err := buildDeployment("ns", "p", "e", 1, inference.EndpointSpec{Backend: "tgi"}, 1); err == nil {
		t.Error("unknown backend built")
	}
}

// defaulted returns d as the API server stores it: defaults filled in,
// status and fields of other controllers set.
func defaulted(d *appsv1.Deployment) *appsv1.Deployment {
	live := d.DeepCopy()
	live.ResourceVersion = "7"
	live.Labels["team"] = "ml"
	live.Annotations["deployment.kubernetes.io/revision"] = "1"
	live.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	live.Spec.MinReadySeconds = 10
	ps := &live.Spec.Template.Spec
	ps.RestartPolicy = corev1.RestartPolicyAlways
	ps.DNSPolicy = corev1.DNSClusterFirst
	ps.SchedulerName = "default-scheduler"
	ps.TerminationGracePeriodSeconds = ptr.To[int64](30)
	ps.SecurityContext = &corev1.PodSecurityContext{}
	live.Status = appsv1.DeploymentStatus{Replicas: 2, ReadyReplicas: 1}
	return live
}

func TestMergeDeployment(t *testing.T) {
	desired := func(replicas int, mut func(*inference.EndpointSpec)) *appsv1.Deployment {
		s := vllmSpec()
		if mut != nil {
			mut(&s)
		}
		d, err := buildDeployment("atelier-p", "p", "llama", 1, s, replicas)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, tc := range []struct {
		name        string
		live        *appsv1.Deployment
		desired     *appsv1.Deployment
		wantChanged bool
		check       func(t *testing.T, got *appsv1.Deployment)
	}{{
		name: "server defaults are no change", live: defaulted(desired(2, nil)), desired: desired(2, nil),
	}, {
		name: "replicas overwritten, others' fields kept", live: defaulted(desired(2, nil)), desired: desired(5, nil), wantChanged: true,
		check: func(t *testing.T, got *appsv1.Deployment) {
			if *got.Spec.Replicas != 5 || got.Spec.MinReadySeconds != 10 || got.Labels["team"] != "ml" ||
				got.Status.ReadyReplicas != 1 || got.Spec.Template.Spec.SchedulerName != "default-scheduler" {
				t.Errorf("after merge: %+v", got.Spec)
			}
		},
	}, {
		name: "drift in a field Atelier sets is reverted",
		live: func() *appsv1.Deployment {
			l := defaulted(desired(2, nil))
			l.Spec.Template.Spec.Containers[0].Image = "vllm/vllm-openai:latest"
			return l
		}(),
		desired: desired(2, nil), wantChanged: true,
		check: func(t *testing.T, got *appsv1.Deployment) {
			if img := got.Spec.Template.Spec.Containers[0].Image; img != "vllm/vllm-openai:v0.9.1" {
				t.Errorf("image %q", img)
			}
		},
	}, {
		name:    "a removed field is caught by the template hash",
		live:    defaulted(desired(2, nil)),
		desired: desired(2, func(s *inference.EndpointSpec) { s.Env = nil }), wantChanged: true,
		check: func(t *testing.T, got *appsv1.Deployment) {
			if env := got.Spec.Template.Spec.Containers[0].Env; len(env) != 0 {
				t.Errorf("env kept: %v", env)
			}
		},
	}, {
		name: "strategy drift is reverted",
		live: func() *appsv1.Deployment {
			l := defaulted(desired(2, nil))
			l.Spec.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromString("25%"))
			return l
		}(),
		desired: desired(2, nil), wantChanged: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.live.DeepCopy()
			if changed := mergeDeployment(got, tc.desired); changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if tc.check != nil {
				tc.check(t, got)
			}
			if mergeDeployment(got, tc.desired) {
				t.Error("a second merge still changes something")
			}
		})
	}
}

func TestMergeService(t *testing.T) {
	info, _ := inference.Info(inference.BackendTriton)
	l := EndpointLabels("p", "e")
	desired := buildService("ns", "e", l, l, info)
	live := desired.DeepCopy()
	live.Spec.ClusterIP, live.Spec.ClusterIPs = "10.0.0.7", []string{"10.0.0.7"}
	live.Spec.SessionAffinity = corev1.ServiceAffinityNone
	if mergeService(live, desired) {
		t.Error("server-set fields count as a change")
	}
	sel := RevisionLabels("p", "e", 2)
	if !mergeService(live, buildService("ns", "e", l, sel, info)) {
		t.Fatal("selector change not applied")
	}
	if diff := cmp.Diff(sel, live.Spec.Selector); diff != "" || live.Spec.ClusterIP != "10.0.0.7" {
		t.Errorf("selector (-want +got):\n%s; clusterIP %q", diff, live.Spec.ClusterIP)
	}
	vinfo, _ := inference.Info(inference.BackendVLLM)
	if !mergeService(live, buildService("ns", "e", l, sel, vinfo)) || len(live.Spec.Ports) != 1 {
		t.Errorf("ports not replaced: %v", live.Spec.Ports)
	}
}

// An endpoint's pod settings reach its replicas' pods (the template hash
// with them, so changing them rolls the pods); Atelier's selector labels
// stay whatever a patch says.
func TestBuildDeploymentPodSettings(t *testing.T) {
	s := vllmSpec()
	plain, err := buildDeployment("atelier-p", "p", "llama", 3, s, 1)
	if err != nil {
		t.Fatal(err)
	}
	s.Pod = &schema.Pod{
		Tolerations:        []schema.Toleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}},
		ServiceAccountName: "serving",
		Volumes:            []schema.Volume{{Name: "cache", MountPath: "/cache", PersistentVolumeClaim: "hf-cache"}},
		Patch:              json.RawMessage(`{"metadata":{"labels":{"atelier.dev/endpoint":"other"}},"spec":{"terminationGracePeriodSeconds":90}}`),
	}
	d, err := buildDeployment("atelier-p", "p", "llama", 3, s, 1)
	if err != nil {
		t.Fatal(err)
	}
	ps := d.Spec.Template.Spec
	if len(ps.Tolerations) != 1 || ps.ServiceAccountName != "serving" || ptr.Deref(ps.TerminationGracePeriodSeconds, 0) != 90 {
		t.Errorf("pod spec %+v", ps)
	}
	if m := ps.Containers[0].VolumeMounts; len(m) == 0 || m[len(m)-1].MountPath != "/cache" {
		t.Errorf("mounts %+v", m)
	}
	if d.Spec.Template.Labels[framework.LabelEndpoint] != "llama" {
		t.Errorf("a patch changed Atelier's label: %v", d.Spec.Template.Labels)
	}
	if d.Annotations[AnnotationTemplateHash] == plain.Annotations[AnnotationTemplateHash] {
		t.Error("the template hash ignores pod settings")
	}
	s.Pod = &schema.Pod{Patch: json.RawMessage(`{"spec":{"containers":"nope"}}`)}
	if _, err := buildDeployment("atelier-p", "p", "llama", 3, s, 1); err == nil || !strings.Contains(err.Error(), "spec.pod") {
		t.Errorf("bad patch: %v", err)
	}
}
