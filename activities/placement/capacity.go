package placement

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/gpu/gpukube"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// GPU resource and node label names of the NVIDIA device plugin and GPU
// feature discovery, which is how GPU nodes announce what they have.
const (
	GPUResource     corev1.ResourceName = "nvidia.com/gpu"
	GPUProductLabel                     = "nvidia.com/gpu.product"
	// UnknownGPUProduct groups GPUs of nodes without GPUProductLabel.
	UnknownGPUProduct = "unknown"
)

// activePods selects pods that hold (or will hold) their requests: the API
// server filters terminated ones, which on a busy cluster are most pods.
const activePods = "status.phase!=Succeeded,status.phase!=Failed"

// listPage bounds list responses so a large cluster is read in pages rather
// than in one huge response.
const listPage = 500

// MeasureCapacity computes a cluster's capacity: the allocatable CPU, memory
// and nvidia.com/gpu (by product label) of its ready, schedulable nodes,
// and what remains after the requests of the non-terminated pods bound to
// them. Pending pods not yet bound to a node are not subtracted: they may
// never fit, and counting them would make a cluster look full for good.
// Free amounts are clamped at zero per node. GPUNodes is the per-node
// inventory GPU admission decides on (gpu.Node: product, memory, whole GPUs
// and MIG slices, taints, readiness, and the GPUs held by pods Atelier does
// not own). It needs list on nodes and pods, cluster-wide.
func MeasureCapacity(ctx context.Context, kube kubernetes.Interface) (catalog.ClusterCapacity, error) {
	type node struct {
		product                      string
		gpu, cpu, mem                int64 // allocatable
		usedGPU, usedCPU, usedMemory int64
	}
	nodes := map[string]*node{}
	var inventory []gpu.Node // GPU nodes, ready or not, for admission
	err := listAll(ctx, func(ctx context.Context, opts metav1.ListOptions) (string, error) {
		list, err := kube.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return "", err
		}
		for i := range list.Items {
			n := &list.Items[i]
			if g := gpukube.Node(n); g.GPUs > 0 || len(g.MIG) > 0 {
				inventory = append(inventory, g)
			}
			if n.Spec.Unschedulable || !ready(n) {
				continue
			}
			a := n.Status.Allocatable
			nd := &node{cpu: a.Cpu().MilliValue(), mem: a.Memory().Value()}
			if q, ok := a[GPUResource]; ok {
				nd.gpu = q.Value()
			}
			if nd.gpu > 0 {
				nd.product = n.Labels[GPUProductLabel]
				if nd.product == "" {
					nd.product = UnknownGPUProduct
				}
			}
			nodes[n.Name] = nd
		}
		return list.Continue, nil
	})
	if err != nil {
		return catalog.ClusterCapacity{}, fmt.Errorf("list nodes: %w", err)
	}

	gpuNodes := make(map[string]bool, len(inventory))
	for _, g := range inventory {
		gpuNodes[g.Name] = true
	}
	foreign := map[string][]corev1.Pod{} // node → pods Atelier does not own
	err = listAll(ctx, func(ctx context.Context, opts metav1.ListOptions) (string, error) {
		opts.FieldSelector = activePods
		list, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return "", err
		}
		for i := range list.Items {
			p := &list.Items[i]
			// Checked again: not every API (fakes, some proxies) honours
			// field selectors.
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			if gpuNodes[p.Spec.NodeName] && !ownedByAtelier(p) {
				foreign[p.Spec.NodeName] = append(foreign[p.Spec.NodeName], *p)
			}
			nd, ok := nodes[p.Spec.NodeName]
			if !ok {
				continue // unbound, or on a node left out above
			}
			cpu, mem, gpu := podRequests(p)
			nd.usedCPU += cpu
			nd.usedMemory += mem
			nd.usedGPU += gpu
		}
		return list.Continue, nil
	})
	if err != nil {
		return catalog.ClusterCapacity{}, fmt.Errorf("list pods: %w", err)
	}

	for i := range inventory {
		gpukube.InUse(&inventory[i], foreign[inventory[i].Name], ownedByAtelier)
	}
	slices.SortFunc(inventory, func(a, b gpu.Node) int { return strings.Compare(a.Name, b.Name) })

	c := catalog.ClusterCapacity{GPUs: map[string]catalog.ResourceAmount{}, Nodes: len(nodes), GPUNodes: inventory}
	for _, nd := range nodes {
		c.CPUMillis.Total += nd.cpu
		c.CPUMillis.Free += max(nd.cpu-nd.usedCPU, 0)
		c.MemoryBytes.Total += nd.mem
		c.MemoryBytes.Free += max(nd.mem-nd.usedMemory, 0)
		if nd.gpu > 0 {
			g := c.GPUs[nd.product]
			g.Total += nd.gpu
			g.Free += max(nd.gpu-nd.usedGPU, 0)
			c.GPUs[nd.product] = g
		}
	}
	return c, nil
}

// ownedByAtelier reports whether a pod belongs to a run of Atelier (a
// step, or a run's shared RayCluster): GPU admission counts those through
// its admitted workloads, so the inventory leaves them out of a node's
// in-use GPUs. An inference endpoint's replicas are Atelier's too but are
// not admitted workloads, so they count as in use: admission must not
// hand their GPUs to a step.
func ownedByAtelier(p *corev1.Pod) bool {
	return p.Labels[framework.LabelManagedBy] == framework.ManagedByValue && p.Labels[framework.LabelRun] != ""
}

// listAll calls list page by page until the server has no more.
func listAll(ctx context.Context, list func(context.Context, metav1.ListOptions) (string, error)) error {
	opts := metav1.ListOptions{Limit: listPage}
	for {
		next, err := list(ctx, opts)
		if err != nil {
			return err
		}
		if next == "" {
			return nil
		}
		opts.Continue = next
	}
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podRequests returns what the scheduler reserves for a pod: the larger of
// the app containers' (plus sidecars') requests and each init container's
// request (plus the sidecars started before it), plus the pod overhead.
// This is the rule of k8s.io/component-helpers/resource.PodRequests, kept
// here to avoid that dependency for three resources.
func podRequests(p *corev1.Pod) (cpuMillis, memBytes, gpus int64) {
	type amount struct{ cpu, mem, gpu int64 }
	req := func(r corev1.ResourceRequirements) amount {
		a := amount{cpu: r.Requests.Cpu().MilliValue(), mem: r.Requests.Memory().Value()}
		// Extended resources may be given as limits only; the API server
		// copies them to requests, but be robust to objects that skipped
		// defaulting.
		if q, ok := r.Requests[GPUResource]; ok {
			a.gpu = q.Value()
		} else if q, ok := r.Limits[GPUResource]; ok {
			a.gpu = q.Value()
		}
		return a
	}
	var sum, sidecars, initMax amount
	for _, c := range p.Spec.Containers {
		a := req(c.Resources)
		sum.cpu, sum.mem, sum.gpu = sum.cpu+a.cpu, sum.mem+a.mem, sum.gpu+a.gpu
	}
	for _, c := range p.Spec.InitContainers {
		a := req(c.Resources)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			// A sidecar runs for the pod's whole life.
			sidecars.cpu, sidecars.mem, sidecars.gpu = sidecars.cpu+a.cpu, sidecars.mem+a.mem, sidecars.gpu+a.gpu
			a = sidecars
		} else {
			a.cpu, a.mem, a.gpu = a.cpu+sidecars.cpu, a.mem+sidecars.mem, a.gpu+sidecars.gpu
		}
		initMax.cpu, initMax.mem, initMax.gpu = max(initMax.cpu, a.cpu), max(initMax.mem, a.mem), max(initMax.gpu, a.gpu)
	}
	sum.cpu, sum.mem, sum.gpu = sum.cpu+sidecars.cpu, sum.mem+sidecars.mem, sum.gpu+sidecars.gpu
	cpuMillis, memBytes, gpus = max(sum.cpu, initMax.cpu), max(sum.mem, initMax.mem), max(sum.gpu, initMax.gpu)
	if o := p.Spec.Overhead; o != nil {
		cpuMillis += o.Cpu().MilliValue()
		memBytes += o.Memory().Value()
	}
	return cpuMillis, memBytes, gpus
}
