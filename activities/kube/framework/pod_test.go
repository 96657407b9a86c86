package framework

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/schema"
)

func template() *corev1.PodTemplateSpec {
	t := &corev1.PodTemplateSpec{}
	t.Labels = map[string]string{"atelier.dev/run": "r1"}
	t.Spec.NodeSelector = map[string]string{"nvidia.com/gpu.product": "NVIDIA-L4"}
	t.Spec.Containers = []corev1.Container{{Name: "step", Image: "busybox"}}
	return t
}

func TestApplyPod(t *testing.T) {
	tpl := template()
	p := &schema.Pod{
		NodeSelector:       map[string]string{"pool": "gpu", "nvidia.com/gpu.product": "other"},
		Tolerations:        []schema.Toleration{{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"}},
		PriorityClassName:  "batch-low",
		ServiceAccountName: "trainer",
		ImagePullSecrets:   []string{"regcred"},
		Labels:             map[string]string{"team": "vision", "atelier.dev/run": "forged"},
		Volumes: []schema.Volume{
			{Name: "data", MountPath: "/data", ReadOnly: true, PersistentVolumeClaim: "datasets"},
			{Name: "scratch", MountPath: "/scratch", EmptyDir: &schema.EmptyDir{Medium: "Memory", SizeLimit: "1Gi"}},
		},
		Patch: json.RawMessage(`{"metadata": {"labels": {"atelier.dev/run": "patched", "from": "patch"}}, "spec": {"dnsPolicy": "None", "containers": [{"name": "step", "workingDir": "/data"}]}}`),
	}
	if err := ApplyPod(tpl, "step", p); err != nil {
		t.Fatal(err)
	}
	s := tpl.Spec
	if s.NodeSelector["pool"] != "gpu" || s.NodeSelector["nvidia.com/gpu.product"] != "NVIDIA-L4" {
		t.Errorf("node selector %v (the GPU product Atelier chose must win)", s.NodeSelector)
	}
	if len(s.Tolerations) != 1 || s.Tolerations[0].Operator != corev1.TolerationOpExists || s.PriorityClassName != "batch-low" ||
		s.ServiceAccountName != "trainer" || s.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("spec %+v", s)
	}
	if tpl.Labels["atelier.dev/run"] != "r1" || tpl.Labels["team"] != "vision" || tpl.Labels["from"] != "patch" {
		t.Errorf("labels %v (atelier.dev/ stays Atelier's, even through a patch)", tpl.Labels)
	}
	c := s.Containers[0]
	if len(s.Volumes) != 2 || s.Volumes[0].PersistentVolumeClaim.ClaimName != "datasets" || s.Volumes[1].EmptyDir.SizeLimit.String() != "1Gi" {
		t.Errorf("volumes %+v", s.Volumes)
	}
	if len(c.VolumeMounts) != 2 || c.VolumeMounts[0].MountPath != "/data" || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
	if s.DNSPolicy != corev1.DNSNone || c.WorkingDir != "/data" || c.Image != "busybox" {
		t.Errorf("the patch merged wrong: dns %q, container %+v", s.DNSPolicy, c)
	}
}

func TestPodPolicy(t *testing.T) {
	ok := template()
	ok.Spec.ServiceAccountName = "trainer"
	if err := (PodPolicy{ServiceAccounts: []string{"trainer"}}).CheckPod(&ok.Spec); err != nil {
		t.Fatalf("allowed pod refused: %v", err)
	}
	bad := template()
	bad.Spec.ServiceAccountName = "cluster-admin"
	bad.Spec.HostNetwork = true
	bad.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
	bad.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	err := PodPolicy{}.CheckPod(&bad.Spec)
	var app *temporal.ApplicationError
	if err == nil || !errors.As(err, &app) || app.Type() != activities.ErrTypeInvalidStep {
		t.Fatalf("CheckPod = %v", err)
	}
	for _, want := range []string{`serviceAccountName "cluster-admin"`, "hostNetwork", "volume root: hostPath", "container step: privileged"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	// A patch cannot slip a host path past the policy: it is checked after.
	tpl := template()
	if err := ApplyPod(tpl, "step", &schema.Pod{Patch: json.RawMessage(`{"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/etc"}}]}}`)}); err != nil {
		t.Fatal(err)
	}
	if err := (PodPolicy{}).CheckPod(&tpl.Spec); err == nil {
		t.Fatal("a patched-in hostPath passed")
	}
}

// A patch cannot slip a service account past the allow-list through the
// deprecated field (the API server copies it), nor skip the scheduler.
func TestPolicyRefusesDeprecatedServiceAccountAndNodeName(t *testing.T) {
	err := PodPolicy{}.CheckPod(&corev1.PodSpec{DeprecatedServiceAccount: "admin"})
	if err == nil || !strings.Contains(err.Error(), "serviceAccount (deprecated)") {
		t.Errorf("deprecated service account: %v", err)
	}
	err = PodPolicy{}.CheckPod(&corev1.PodSpec{NodeName: "gpu-1"})
	if err == nil || !strings.Contains(err.Error(), "nodeName") {
		t.Errorf("nodeName: %v", err)
	}
	if err := (PodPolicy{ServiceAccounts: []string{"trainer"}}).CheckPod(&corev1.PodSpec{ServiceAccountName: "trainer", DeprecatedServiceAccount: "trainer"}); err != nil {
		t.Errorf("the same allowed account in both fields: %v", err)
	}
}
