package framework

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/schema"
)

// The operator's defaults fill what the step's own settings left unset and
// never override them; the policy is checked after (by the caller).
func TestApplyPodDefaults(t *testing.T) {
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"atelier.dev/run": "r1", "team": "vision"}},
		Spec: corev1.PodSpec{
			NodeSelector:      map[string]string{"pool": "step-pool"},
			PriorityClassName: "urgent",
			Tolerations:       []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "a", Effect: corev1.TaintEffectNoSchedule}},
			Volumes:           []corev1.Volume{{Name: "scratch"}},
			Containers:        []corev1.Container{{Name: "step"}},
		},
	}
	d := &schema.Pod{
		NodeSelector:       map[string]string{"pool": "default-pool", "zone": "a"},
		PriorityClassName:  "batch",
		ServiceAccountName: "trainer",
		Tolerations: []schema.Toleration{
			{Key: "dedicated", Operator: "Equal", Value: "a", Effect: "NoSchedule"}, // the step has it
			{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"},
		},
		ImagePullSecrets: []string{"registry"},
		Labels:           map[string]string{"team": "platform", "cost-center": "ml", "atelier.dev/run": "x"},
		Volumes: []schema.Volume{
			{Name: "scratch", MountPath: "/other", EmptyDir: &schema.EmptyDir{}},
			{Name: "cache", MountPath: "/cache", EmptyDir: &schema.EmptyDir{}},
		},
	}
	if err := ApplyPodDefaults(&tmpl, "step", d); err != nil {
		t.Fatal(err)
	}
	s := tmpl.Spec
	if s.NodeSelector["pool"] != "step-pool" || s.NodeSelector["zone"] != "a" {
		t.Errorf("node selector %v", s.NodeSelector)
	}
	if s.PriorityClassName != "urgent" || s.ServiceAccountName != "trainer" {
		t.Errorf("priority %q, service account %q", s.PriorityClassName, s.ServiceAccountName)
	}
	if len(s.Tolerations) != 2 || s.Tolerations[1].Key != "nvidia.com/gpu" {
		t.Errorf("tolerations %+v", s.Tolerations)
	}
	if len(s.ImagePullSecrets) != 1 {
		t.Errorf("pull secrets %+v", s.ImagePullSecrets)
	}
	if l := tmpl.Labels; l["team"] != "vision" || l["cost-center"] != "ml" || l["atelier.dev/run"] != "r1" {
		t.Errorf("labels %v", l)
	}
	if len(s.Volumes) != 2 || s.Volumes[1].Name != "cache" || len(s.Containers[0].VolumeMounts) != 1 || s.Containers[0].VolumeMounts[0].MountPath != "/cache" {
		t.Errorf("volumes %+v mounts %+v", s.Volumes, s.Containers[0].VolumeMounts)
	}
	if err := ApplyPodDefaults(&tmpl, "step", nil); err != nil {
		t.Fatal(err)
	}
}
