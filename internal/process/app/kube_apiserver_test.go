package app

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/activities/placement"
	"github.com/atelier-ml/atelier/internal/process/config"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// TestCapacityAgainstAPIServer runs the cluster worker's client setup and
// capacity measurement against a real kube-apiserver, which (unlike the
// fake clientset) enforces the pod field selector's syntax and supported
// fields.
func TestCapacityAgainstAPIServer(t *testing.T) {
	kc := kubetest.Start(t)
	cfg := config.Default()
	cfg.Cluster, cfg.Kubeconfig = "kubetest", kc.Kubeconfig()
	rc, err := NewKubeRESTConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clients, err := NewKubeClients(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	nodes := clients.Kube.CoreV1().Nodes()
	n, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "capacity-gpu-1", Labels: map[string]string{placement.GPUProductLabel: "NVIDIA-L4"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(t.Context(), n.Name, metav1.DeleteOptions{}) })
	n.Status.Allocatable = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		placement.GPUResource: resource.MustParse("4"),
	}
	n.Status.Capacity = n.Status.Allocatable
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	ns := kc.Namespace(t)
	mkPod := func(name string, phase corev1.PodPhase, gpus string) {
		t.Helper()
		p, err := clients.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{
				Name: "c", Image: "busybox",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
					Limits:   corev1.ResourceList{placement.GPUResource: resource.MustParse(gpus)},
				},
			}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = phase
		if _, err := clients.Kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mkPod("running", corev1.PodRunning, "1")
	mkPod("done", corev1.PodSucceeded, "2")

	c, err := placement.MeasureCapacity(ctx, clients.Kube)
	if err != nil {
		t.Fatal(err)
	}
	// Other tests' nodes may exist in this shared server; look at ours.
	if g := c.GPUs["NVIDIA-L4"]; g.Total != 4 || g.Free != 3 {
		t.Fatalf("L4 GPUs %+v (capacity %+v)", g, c)
	}
}
