package gpukube

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/gpu"
)

func TestNode(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: map[string]string{
			gpu.LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", gpu.LabelGPUMemory: "81920"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{
				"nvidia.com/gpu":         resource.MustParse("4"),
				"nvidia.com/mig-2g.20gb": resource.MustParse("3"),
				"nvidia.com/mig-1g.10gb": resource.MustParse("7"),
				corev1.ResourceCPU:       resource.MustParse("64"),
			},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	pods := []corev1.Pod{
		{Spec: corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/mig-1g.10gb": resource.MustParse("2")}}}}}},
		{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"atelier": "yes"}}, Spec: corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}}}}}},
		{Spec: corev1.PodSpec{NodeName: "other", Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}}}}}},
	}
	got := Node(n)
	InUse(&got, pods, func(p *corev1.Pod) bool { return p.Labels["atelier"] == "yes" })
	want := gpu.Node{Name: "gpu-1", GPUType: "NVIDIA-A100-SXM4-80GB", GPUMemoryMiB: 81920, GPUs: 4, GPUsInUse: 1, Ready: true,
		MIG:    []gpu.MIGSlices{{Profile: "nvidia.com/mig-1g.10gb", Allocatable: 7, InUse: 2}, {Profile: "nvidia.com/mig-2g.20gb", Allocatable: 3}},
		Taints: []gpu.Taint{{Key: "nvidia.com/gpu", Effect: gpu.NoSchedule}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Node() mismatch (-want +got):\n%s", diff)
	}
}
