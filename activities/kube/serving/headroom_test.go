package serving

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/catalog"
)

type policies map[string]gpu.ProjectPolicy

func (p policies) GetGPUPolicy(_ context.Context, project string) (catalog.GPUPolicy, error) {
	pol, ok := p[project]
	if !ok {
		return catalog.GPUPolicy{}, catalog.ErrNotFound
	}
	return catalog.GPUPolicy{ProjectPolicy: pol}, nil
}

func gpuPod(name, node string, selector map[string]string, phase corev1.PodPhase, res corev1.ResourceName, n int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "atelier-p"},
		Spec: corev1.PodSpec{NodeName: node, NodeSelector: selector, Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{res: *resource.NewQuantity(n, resource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

// Headroom is the quota (nominal plus borrowing limit) less what the
// project's live pods hold, typed by the product they select or their
// node's; finished pods hold nothing; no policy means no limit.
func TestHeadroom(t *testing.T) {
	l4 := map[string]string{gpu.LabelGPUProduct: "NVIDIA-L4"}
	kube := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: l4}},
		gpuPod("replica", "n1", l4, corev1.PodRunning, gpu.ResourceGPU, 2),
		gpuPod("step", "n1", nil, corev1.PodRunning, gpu.ResourceGPU, 1),
		gpuPod("done", "n1", l4, corev1.PodSucceeded, gpu.ResourceGPU, 4),
		gpuPod("mig", "", nil, corev1.PodPending, "nvidia.com/mig-1g.10gb", 3),
	)
	s := New(Clients{Kube: kube}, WithQuotas(policies{"p": {Name: "p", Quotas: []gpu.Quota{
		{Resource: "NVIDIA-L4", Nominal: 4, BorrowingLimit: 2},
		{Resource: "nvidia.com/mig-1g.10gb", Nominal: 2},
		{Resource: "NVIDIA-H100-80GB-HBM3", Nominal: 1, BorrowingLimit: gpu.Unlimited},
	}}}))
	got, err := s.Headroom(ctx, activities.EndpointRef{Project: "p", Endpoint: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	want := activities.EndpointHeadroom{Limited: true,
		Headroom: []inference.GPUAmount{{Type: "NVIDIA-L4", GPUs: 3}, {Type: "nvidia.com/mig-1g.10gb", GPUs: 0}, {Type: "NVIDIA-H100-80GB-HBM3", GPUs: unlimitedHeadroom}},
		Used:     []inference.GPUAmount{{Type: "NVIDIA-L4", GPUs: 3}, {Type: "nvidia.com/mig-1g.10gb", GPUs: 3}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("headroom (-want +got):\n%s", diff)
	}
	free, err := s.Headroom(ctx, activities.EndpointRef{Project: "q", Endpoint: "chat"})
	if err != nil || free.Limited {
		t.Errorf("a project without a policy: %+v, %v", free, err)
	}
}
