package placement

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

// node is a fixture node, from kubetest's shared builder.
func node(name, product string, cpu, mem string, gpus int, ready bool) *corev1.Node {
	w := kubetest.MakeNode(name).CPU(cpu).Memory(mem).Ready(ready)
	switch {
	case product != "":
		w.GPUs(product, gpus)
	case gpus > 0:
		w.WholeGPUs(gpus)
	}
	return w.Obj()
}

// The fixtures speak the GPU operator's names; placement must read the
// same ones.
func TestNamesMatchTheGPUOperator(t *testing.T) {
	if GPUProductLabel != kubetest.LabelGPUProduct || GPUResource != kubetest.ResourceGPU {
		t.Errorf("placement reads %s and %s; the GPU operator sets %s and %s",
			GPUProductLabel, GPUResource, kubetest.LabelGPUProduct, kubetest.ResourceGPU)
	}
}

func pod(name, nodeName string, phase corev1.PodPhase, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "atelier-vision"},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: containers},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

func ctr(cpu, mem string, gpus int64) corev1.Container {
	c := corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}}}
	if cpu != "" {
		c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	if gpus > 0 {
		c.Resources.Requests[GPUResource] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return c
}

func TestMeasureCapacity(t *testing.T) {
	cordoned := node("a100-cordoned", a100, "96", "1Ti", 8, true)
	cordoned.Spec.Unschedulable = true

	// A GPU given as a limit only still counts.
	limitOnly := ctr("1", "1Gi", 0)
	limitOnly.Resources.Limits = corev1.ResourceList{GPUResource: resource.MustParse("1")}

	// An init container larger than the app containers sets the request;
	// a sidecar adds to both.
	always := corev1.ContainerRestartPolicyAlways
	sidecar := ctr("500m", "512Mi", 0)
	sidecar.RestartPolicy = &always
	withInit := pod("init", "cpu-1", corev1.PodRunning, ctr("1", "1Gi", 0))
	withInit.Spec.InitContainers = []corev1.Container{sidecar, ctr("3", "1Gi", 0)}
	withInit.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}

	atelierPod := pod("step", "a100-1", corev1.PodRunning, ctr("1", "1Gi", 1))
	atelierPod.Labels = map[string]string{"atelier.dev/managed-by": "atelier", "atelier.dev/run": "r1"}
	// An endpoint's replica is Atelier's but not an admitted workload: its
	// GPU is in use for admission.
	replica := pod("chat-r1", "a100-2", corev1.PodRunning, ctr("1", "1Gi", 1))
	replica.Labels = map[string]string{"atelier.dev/managed-by": "atelier", "atelier.dev/endpoint": "chat"}

	kube := fake.NewClientset(
		node("a100-1", a100, "64", "512Gi", 8, true),
		node("a100-2", a100, "64", "512Gi", 8, true),
		node("h100-1", h100, "128", "1Ti", 4, true),
		node("gpu-nolabel", "", "8", "64Gi", 1, true),
		node("cpu-1", "", "16", "64Gi", 0, true),
		node("not-ready", h100, "128", "1Ti", 8, false),
		cordoned,

		pod("train-0", "a100-1", corev1.PodRunning, ctr("8", "64Gi", 4), ctr("100m", "128Mi", 0)),
		pod("train-1", "a100-2", corev1.PodPending, ctr("8", "64Gi", 2)), // bound, still starting
		pod("train-2", "a100-2", corev1.PodRunning, limitOnly),
		pod("infer", "h100-1", corev1.PodRunning, ctr("120", "900Gi", 4)),
		pod("over", "h100-1", corev1.PodRunning, ctr("64", "1Gi", 0)), // overcommitted CPU: clamps to 0
		withInit,
		pod("done", "a100-1", corev1.PodSucceeded, ctr("32", "256Gi", 4)), // terminated: ignored
		pod("failed", "a100-2", corev1.PodFailed, ctr("32", "256Gi", 4)),
		pod("unbound", "", corev1.PodPending, ctr("1", "1Gi", 8)),               // not scheduled: ignored
		pod("cordoned", "a100-cordoned", corev1.PodRunning, ctr("1", "1Gi", 8)), // node left out
		atelierPod, // counted in Free, not in the inventory's in-use
		replica,    // counted in both
	)
	var selectors []string
	kube.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		selectors = append(selectors, a.(k8stesting.ListAction).GetListRestrictions().Fields.String())
		return false, nil, nil
	})

	got, err := MeasureCapacity(t.Context(), kube)
	if err != nil {
		t.Fatal(err)
	}
	const gi = int64(1) << 30
	want := catalog.ClusterCapacity{
		GPUs: map[string]catalog.ResourceAmount{
			a100:              {Total: 16, Free: 16 - 4 - 1 - 2 - 1 - 1},
			h100:              {Total: 4, Free: 0},
			UnknownGPUProduct: {Total: 1, Free: 1},
		},
		CPUMillis: catalog.ResourceAmount{
			Total: 64000 + 64000 + 128000 + 8000 + 16000,
			// a100-1: 64-8.1; a100-2: 64-8-1-1 (with the replica); h100-1: 0 (clamped); nolabel: 8;
			// cpu-1: 16 - (max(1+0.5, 0.5+3) + 0.1).
			Free: (64000 - 8100 - 1000) + (64000 - 9000 - 1000) + 0 + 8000 + (16000 - 3600),
		},
		MemoryBytes: catalog.ResourceAmount{
			Total: 512*gi + 512*gi + 1024*gi + 64*gi + 64*gi,
			Free:  (512*gi - 64*gi - 128<<20 - gi) + (512*gi - 66*gi) + (1024*gi - 901*gi) + 64*gi + (64*gi - 1536<<20),
		},
		Nodes: 5,
		GPUNodes: []gpu.Node{
			{Name: "a100-1", GPUType: a100, GPUMemoryMiB: 81920, GPUs: 8, GPUsInUse: 4, Ready: true},
			{Name: "a100-2", GPUType: a100, GPUMemoryMiB: 81920, GPUs: 8, GPUsInUse: 4, Ready: true}, // 2 + 1 + the endpoint replica
			{Name: "a100-cordoned", GPUType: a100, GPUMemoryMiB: 81920, GPUs: 8, GPUsInUse: 8, Ready: true, Unschedulable: true},
			{Name: "gpu-nolabel", GPUs: 1, Ready: true},
			{Name: "h100-1", GPUType: h100, GPUMemoryMiB: 81559, GPUs: 4, GPUsInUse: 4, Ready: true},
			{Name: "not-ready", GPUType: h100, GPUMemoryMiB: 81559, GPUs: 8},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("capacity (-want +got):\n%s", diff)
	}
	// The string form is normalised (sorted), so compare parsed selectors.
	if want := fields.ParseSelectorOrDie(activePods).String(); len(selectors) != 1 || selectors[0] != want {
		t.Errorf("pod list field selectors %q, want [%q]", selectors, want)
	}
}

func TestMeasureCapacityEmptyAndErrors(t *testing.T) {
	got, err := MeasureCapacity(t.Context(), fake.NewClientset())
	if err != nil || got.Nodes != 0 || got.GPUs == nil || len(got.GPUs) != 0 {
		t.Fatalf("empty cluster: %+v %v", got, err)
	}
	kube := fake.NewClientset()
	kube.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("nodes is forbidden")
	})
	if _, err := MeasureCapacity(t.Context(), kube); err == nil {
		t.Fatal("a list error was swallowed")
	}
}

func TestMeasureCapacityPages(t *testing.T) {
	// The fake ignores Limit; serve two pages by hand to check Continue is
	// followed.
	kube := fake.NewClientset()
	calls := 0
	kube.PrependReactor("list", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		l := &corev1.NodeList{}
		if calls == 1 {
			l.Continue = "page2"
			l.Items = []corev1.Node{*node("n1", a100, "4", "8Gi", 2, true)}
		} else {
			l.Items = []corev1.Node{*node("n2", a100, "4", "8Gi", 2, true)}
		}
		return true, l, nil
	})
	got, err := MeasureCapacity(t.Context(), kube)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || got.Nodes != 2 || got.GPUs[a100].Total != 4 {
		t.Fatalf("calls %d, capacity %+v", calls, got)
	}
}
