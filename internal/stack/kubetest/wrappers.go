package kubetest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
)

// Fixture builders in the style of kueue's testing wrappers: start from
// Make*, chain setters, finish with Obj(). One place for every test's
// Kubernetes fixtures, instead of per-test helpers.

// Node labels and resources of NVIDIA's GPU operator (GPU feature
// discovery and the device plugin), which Atelier's GPU placement reads.
const (
	LabelGPUProduct = "nvidia.com/gpu.product"
	LabelGPUMemory  = "nvidia.com/gpu.memory" // MiB per GPU
	LabelGPUCount   = "nvidia.com/gpu.count"
	ResourceGPU     = corev1.ResourceName("nvidia.com/gpu")
	// TaintGPU is the taint GPU node pools commonly carry so that only pods
	// that tolerate it (asked for GPUs) land there.
	TaintGPU = "nvidia.com/gpu"
)

// GPU products used by the fixtures, as GPU feature discovery labels them.
const (
	H100 = "NVIDIA-H100-80GB-HBM3"
	A100 = "NVIDIA-A100-SXM4-80GB"
	L4   = "NVIDIA-L4"
)

// gpuMemoryMiB is the memory per GPU of the known products.
var gpuMemoryMiB = map[string]int{H100: 81559, A100: 81920, L4: 23034, "NVIDIA-A100-SXM4-40GB": 40960}

// NodeWrapper builds a fake node that kwok manages.
type NodeWrapper struct{ corev1.Node }

// MakeNode returns a Ready-to-be fake node with 32 CPUs, 256 GiB of memory
// and room for 110 pods. kwok reports it Ready once it exists.
func MakeNode(name string) *NodeWrapper {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &NodeWrapper{corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok"},
			Annotations: map[string]string{FakeNodeAnnotation: FakeNodeAnnotationValue},
		},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res.DeepCopy()},
	}}
}

// Obj returns the node.
func (w *NodeWrapper) Obj() *corev1.Node { return &w.Node }

// Label sets a label.
func (w *NodeWrapper) Label(k, v string) *NodeWrapper {
	w.Labels[k] = v
	return w
}

// Resource sets the capacity and allocatable of a resource.
func (w *NodeWrapper) Resource(name corev1.ResourceName, q string) *NodeWrapper {
	w.Status.Capacity[name] = resource.MustParse(q)
	w.Status.Allocatable[name] = resource.MustParse(q)
	return w
}

// CPU sets the node's CPUs (a quantity: "8", "500m").
func (w *NodeWrapper) CPU(q string) *NodeWrapper { return w.Resource(corev1.ResourceCPU, q) }

// Memory sets the node's memory ("64Gi").
func (w *NodeWrapper) Memory(q string) *NodeWrapper { return w.Resource(corev1.ResourceMemory, q) }

// GPUs makes it a GPU node with n GPUs of product: allocatable
// nvidia.com/gpu and GPU feature discovery's product, memory and count
// labels.
func (w *NodeWrapper) GPUs(product string, n int) *NodeWrapper {
	w.Label(LabelGPUProduct, product).Label(LabelGPUCount, strconv.Itoa(n))
	if mem, ok := gpuMemoryMiB[product]; ok {
		w.Label(LabelGPUMemory, strconv.Itoa(mem))
	}
	return w.Resource(ResourceGPU, strconv.Itoa(n))
}

// MIG partitions the node's GPUs with NVIDIA's "mixed" MIG strategy: each
// profile becomes its own resource, e.g. MIG("1g.10gb", 7) adds
// allocatable nvidia.com/mig-1g.10gb: 7. Whole GPUs that are partitioned
// are no longer offered as nvidia.com/gpu, so call GPUs first and MIG after
// with the GPUs it uses (wholeGPUs left as nvidia.com/gpu).
func (w *NodeWrapper) MIG(profile string, count int) *NodeWrapper {
	w.Label("nvidia.com/mig.strategy", "mixed")
	return w.Resource(corev1.ResourceName("nvidia.com/mig-"+profile), strconv.Itoa(count))
}

// WholeGPUs sets how many unpartitioned GPUs remain (after MIG).
func (w *NodeWrapper) WholeGPUs(n int) *NodeWrapper {
	return w.Resource(ResourceGPU, strconv.Itoa(n))
}

// Taint adds a taint.
func (w *NodeWrapper) Taint(key, value string, effect corev1.TaintEffect) *NodeWrapper {
	w.Spec.Taints = append(w.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	return w
}

// Ready sets the Ready condition, as a kubelet (or kwok) reports it: for
// tests that use the node without kwok, e.g. with a fake clientset.
func (w *NodeWrapper) Ready(ready bool) *NodeWrapper {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	w.Status.Conditions = append(w.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: st})
	return w
}

// Unschedulable cordons the node.
func (w *NodeWrapper) Unschedulable() *NodeWrapper {
	w.Spec.Unschedulable = true
	return w
}

// NodeMix is how many nodes of each shape CreateNodes makes, per
// MixedGPUNodes' cycle.
type NodeMix struct {
	H100x8, A100x8, L4x1, A100MIG, CPU int
}

// DefaultMix is a GPU fleet's shape: per 10 nodes, 3 H100×8, 3 A100×8, 2
// L4×1, 1 A100×8 partitioned into MIG slices, 1 CPU-only.
var DefaultMix = NodeMix{H100x8: 3, A100x8: 3, L4x1: 2, A100MIG: 1, CPU: 1}

// MixedGPUNodes returns n fake nodes named <prefix>-<i> following mix's
// cycle: H100×8, A100×8, L4×1, MIG-partitioned A100×8 (4 GPUs as
// 2× mig-3g.40gb + 1g.10gb slices, 4 whole) and CPU-only nodes.
func MixedGPUNodes(prefix string, n int, mix NodeMix) []*corev1.Node {
	var cycle []func(string) *NodeWrapper
	add := func(k int, f func(string) *NodeWrapper) {
		for range k {
			cycle = append(cycle, f)
		}
	}
	add(mix.H100x8, func(name string) *NodeWrapper { return MakeNode(name).GPUs(H100, 8) })
	add(mix.A100x8, func(name string) *NodeWrapper { return MakeNode(name).GPUs(A100, 8) })
	add(mix.L4x1, func(name string) *NodeWrapper { return MakeNode(name).CPU("16").Memory("64Gi").GPUs(L4, 1) })
	add(mix.A100MIG, func(name string) *NodeWrapper {
		return MakeNode(name).GPUs(A100, 8).WholeGPUs(4).MIG("3g.40gb", 4).MIG("1g.10gb", 14)
	})
	add(mix.CPU, func(name string) *NodeWrapper { return MakeNode(name) })
	if len(cycle) == 0 {
		cycle = append(cycle, func(name string) *NodeWrapper { return MakeNode(name) })
	}
	out := make([]*corev1.Node, n)
	for i := range n {
		out[i] = cycle[i%len(cycle)](fmt.Sprintf("%s-%d", prefix, i)).Obj()
	}
	return out
}

// CreateNodes creates nodes with parallel requests (1,000 nodes take a few
// seconds), stopping at the first error.
func CreateNodes(ctx context.Context, kube kubernetes.Interface, nodes []*corev1.Node) error {
	const workers = 32
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range min(workers, len(nodes)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(nodes) || ctx.Err() != nil {
					return
				}
				// The status (capacity, allocatable) is written by a
				// second request: a create ignores it. A merge patch,
				// because kwok may already be initializing the node's
				// status (it keeps capacity and allocatable once set).
				_, err := kube.CoreV1().Nodes().Create(ctx, nodes[i], metav1.CreateOptions{})
				if err == nil {
					var patch []byte
					patch, err = json.Marshal(map[string]any{"status": map[string]any{
						"capacity": nodes[i].Status.Capacity, "allocatable": nodes[i].Status.Allocatable}})
					if err == nil {
						_, err = kube.CoreV1().Nodes().Patch(ctx, nodes[i].Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
					}
				}
				if err != nil {
					once.Do(func() { first = fmt.Errorf("create node %s: %w", nodes[i].Name, err); cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// PodWrapper builds a pod.
type PodWrapper struct{ corev1.Pod }

// MakePod returns a pod with one container "main" that, on a fake node,
// runs until deleted (see ExitsWith).
func MakePod(name, ns string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: "busybox:1.36",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}},
			}},
		},
	}}
}

// Obj returns the pod.
func (w *PodWrapper) Obj() *corev1.Pod { return &w.Pod }

// Label sets a label.
func (w *PodWrapper) Label(k, v string) *PodWrapper {
	w.Labels[k] = v
	return w
}

// Request sets a container resource request (and, for extended resources
// such as GPUs, the equal limit Kubernetes requires).
func (w *PodWrapper) Request(name corev1.ResourceName, q string) *PodWrapper {
	c := &w.Spec.Containers[0]
	c.Resources.Requests[name] = resource.MustParse(q)
	if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
		c.Resources.Limits[name] = resource.MustParse(q)
	}
	return w
}

// GPUs requests n nvidia.com/gpu and tolerates the GPU taint.
func (w *PodWrapper) GPUs(n int) *PodWrapper {
	w.Spec.Tolerations = append(w.Spec.Tolerations, corev1.Toleration{Key: TaintGPU, Operator: corev1.TolerationOpExists})
	return w.Request(ResourceGPU, strconv.Itoa(n))
}

// NodeSelector adds a node selector term.
func (w *PodWrapper) NodeSelector(k, v string) *PodWrapper {
	if w.Spec.NodeSelector == nil {
		w.Spec.NodeSelector = map[string]string{}
	}
	w.Spec.NodeSelector[k] = v
	return w
}

// ExitsWith makes the pod's containers exit with code after running for d,
// with message as termination message (the kwok contract).
func (w *PodWrapper) ExitsWith(code int, d time.Duration, message string) *PodWrapper {
	maps.Copy(w.Annotations, ExitAnnotations(code, d, message))
	return w
}

// JobWrapper builds a batch/v1 Job.
type JobWrapper struct{ batchv1.Job }

// MakeJob returns a Job of one pod that never retries, whose container
// exits 0 after runFor (the kwok contract; 0: at once).
func MakeJob(name, ns string, runFor time.Duration) *JobWrapper {
	pod := MakePod("", ns).ExitsWith(0, runFor, "").Obj()
	return &JobWrapper{batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{}},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template:     corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec},
		},
	}}
}

// Obj returns the Job.
func (w *JobWrapper) Obj() *batchv1.Job { return &w.Job }

// Parallelism runs n pods at once, n completions in all.
func (w *JobWrapper) Parallelism(n int32) *JobWrapper {
	w.Spec.Parallelism, w.Spec.Completions = ptr.To(n), ptr.To(n)
	return w
}

// Request sets a resource request of the pod's container.
func (w *JobWrapper) Request(name corev1.ResourceName, q string) *JobWrapper {
	p := PodWrapper{corev1.Pod{Spec: w.Spec.Template.Spec}}
	p.Request(name, q)
	w.Spec.Template.Spec = p.Spec
	return w
}

// RayJobWrapper builds a KubeRay RayJob that brings its own cluster.
type RayJobWrapper struct{ rayv1.RayJob }

// MakeRayJob returns a RayJob in K8sJobMode with a one-head cluster
// (rayproject/ray image, 1 CPU / 2Gi head) that is shut down when the job
// ends.
func MakeRayJob(name, ns string) *RayJobWrapper {
	return &RayJobWrapper{rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{}},
		Spec: rayv1.RayJobSpec{
			Entrypoint:               "python -c 'print(1)'",
			SubmissionMode:           rayv1.K8sJobMode,
			ShutdownAfterJobFinishes: true,
			BackoffLimit:             ptr.To[int32](0),
			RayClusterSpec: &rayv1.RayClusterSpec{
				HeadGroupSpec: rayv1.HeadGroupSpec{
					RayStartParams: map[string]string{},
					Template:       rayPodTemplate("ray-head", "1", "2Gi"),
				},
			},
		},
	}}
}

func rayPodTemplate(container, cpu, mem string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: container, Image: "rayproject/ray:2.46.0",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem),
		}},
	}}}}
}

// Obj returns the RayJob.
func (w *RayJobWrapper) Obj() *rayv1.RayJob { return &w.RayJob }

// Label sets a label on the RayJob.
func (w *RayJobWrapper) Label(k, v string) *RayJobWrapper {
	w.Labels[k] = v
	return w
}

// Entrypoint sets the entrypoint.
func (w *RayJobWrapper) Entrypoint(e string) *RayJobWrapper {
	w.Spec.Entrypoint = e
	return w
}

// WorkerGroup adds a worker group of replicas pods, each asking for gpus
// nvidia.com/gpu (0: CPU-only) and tolerating the GPU taint.
func (w *RayJobWrapper) WorkerGroup(name string, replicas int32, gpus int) *RayJobWrapper {
	t := rayPodTemplate("ray-worker", "1", "2Gi")
	if gpus > 0 {
		q := resource.MustParse(strconv.Itoa(gpus))
		c := &t.Spec.Containers[0]
		c.Resources.Limits = corev1.ResourceList{ResourceGPU: q}
		c.Resources.Requests[ResourceGPU] = q
		t.Spec.Tolerations = []corev1.Toleration{{Key: TaintGPU, Operator: corev1.TolerationOpExists}}
	}
	w.Spec.RayClusterSpec.WorkerGroupSpecs = append(w.Spec.RayClusterSpec.WorkerGroupSpecs, rayv1.WorkerGroupSpec{
		GroupName: name, Replicas: ptr.To(replicas), MinReplicas: ptr.To(replicas), MaxReplicas: ptr.To(replicas),
		RayStartParams: map[string]string{}, Template: t,
	})
	return w
}

// SubmitterExitsWith makes the submitter pod (and so the Ray job, as the
// fake dashboard reports it) exit with code after runFor, with message as
// the submitter's termination message.
func (w *RayJobWrapper) SubmitterExitsWith(code int, runFor time.Duration, message string) *RayJobWrapper {
	t := &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: ExitAnnotations(code, runFor, message)},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "ray-job-submitter", Image: "rayproject/ray:2.46.0",
			Command: []string{"ray", "job", "submit", "--", "true"},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("200Mi"),
			}},
		}}},
	}
	w.Spec.SubmitterPodTemplate = t
	return w
}
