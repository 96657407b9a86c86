package kubetest_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

func TestMakeNodeGPUs(t *testing.T) {
	n := kubetest.MakeNode("gpu-1").GPUs(kubetest.H100, 8).Taint(kubetest.TaintGPU, "present", corev1.TaintEffectNoSchedule).Obj()
	if n.Labels[kubetest.LabelGPUProduct] != kubetest.H100 || n.Labels[kubetest.LabelGPUMemory] != "81559" || n.Labels[kubetest.LabelGPUCount] != "8" {
		t.Errorf("labels %v", n.Labels)
	}
	if q := n.Status.Allocatable[kubetest.ResourceGPU]; q.Value() != 8 {
		t.Errorf("allocatable gpus %v", q)
	}
	if n.Annotations[kubetest.FakeNodeAnnotation] != kubetest.FakeNodeAnnotationValue || len(n.Spec.Taints) != 1 {
		t.Errorf("annotations %v taints %v", n.Annotations, n.Spec.Taints)
	}
}

func TestMixedGPUNodes(t *testing.T) {
	nodes := kubetest.MixedGPUNodes("n", 1000, kubetest.DefaultMix)
	count := map[string]int{}
	mig := 0
	for _, n := range nodes {
		count[n.Labels[kubetest.LabelGPUProduct]]++
		if q, ok := n.Status.Allocatable["nvidia.com/mig-1g.10gb"]; ok && q.Value() > 0 {
			mig++
		}
	}
	// Per 10: 3 H100, 3+1 (MIG) A100, 2 L4, 1 CPU-only.
	want := map[string]int{kubetest.H100: 300, kubetest.A100: 400, kubetest.L4: 200, "": 100}
	for k, v := range want {
		if count[k] != v {
			t.Errorf("%q: %d nodes, want %d (all: %v)", k, count[k], v, count)
		}
	}
	if mig != 100 || nodes[999].Name != "n-999" {
		t.Errorf("mig nodes %d, last %s", mig, nodes[999].Name)
	}
}

func TestExitAnnotations(t *testing.T) {
	p := kubetest.MakePod("p", "ns").ExitsWith(2, 1500*time.Millisecond, `{"a":1}`).Obj()
	a := p.Annotations
	if a[kubetest.AnnotationExitCode] != "2" || a[kubetest.AnnotationRunFor] != "1.5s" || a[kubetest.AnnotationTerminationMessage] != `{"a":1}` {
		t.Errorf("annotations %v", a)
	}
}
