package gpukube

import (
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/atelier-ml/atelier/gpu"
)

// Node converts a Kubernetes Node: GPU product and memory from the labels
// nvidia.com/gpu.product and nvidia.com/gpu.memory, whole GPUs from
// allocatable nvidia.com/gpu, MIG slices from every allocatable
// nvidia.com/mig-* resource (sorted by profile), taints, the Ready
// condition and spec.unschedulable. In-use counts stay zero: they come
// from the pods on the node that Atelier does not own, which the caller
// lists (see InUse).
func Node(n *corev1.Node) gpu.Node {
	out := gpu.Node{
		Name:          n.Name,
		GPUType:       gpu.Resource(n.Labels[gpu.LabelGPUProduct]),
		Unschedulable: n.Spec.Unschedulable,
	}
	if v, err := strconv.ParseInt(n.Labels[gpu.LabelGPUMemory], 10, 64); err == nil {
		out.GPUMemoryMiB = v
	}
	for name, q := range n.Status.Allocatable { // collected, then sorted below
		switch {
		case name == gpu.ResourceGPU:
			out.GPUs = int(q.Value())
		case strings.HasPrefix(string(name), gpu.ResourceMIGPrefix):
			out.MIG = append(out.MIG, gpu.MIGSlices{Profile: gpu.Resource(name), Allocatable: int(q.Value())})
		}
	}
	slices.SortFunc(out.MIG, func(a, b gpu.MIGSlices) int { return strings.Compare(string(a.Profile), string(b.Profile)) })
	for _, t := range n.Spec.Taints {
		out.Taints = append(out.Taints, gpu.Taint{Key: t.Key, Value: t.Value, Effect: gpu.TaintEffect(t.Effect)})
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return out
}

// InUse adds the GPU and MIG requests of pods that are bound to the node,
// not finished and not owned by Atelier (owned reports whether Atelier
// admitted the pod; its usage is already in gpu.Snapshot.Running).
func InUse(n *gpu.Node, pods []corev1.Pod, owned func(*corev1.Pod) bool) {
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != n.Name || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || owned(p) {
			continue
		}
		for _, c := range p.Spec.Containers {
			n.GPUsInUse += requested(c.Resources, gpu.ResourceGPU)
			for k := range n.MIG {
				n.MIG[k].InUse += requested(c.Resources, corev1.ResourceName(n.MIG[k].Profile))
			}
		}
	}
}

// requested is a container's request of an extended resource, or its limit
// when only that is given (the API server copies such limits to requests,
// but objects that skipped defaulting, e.g. in fakes, have limits only).
func requested(r corev1.ResourceRequirements, name corev1.ResourceName) int {
	if q, ok := r.Requests[name]; ok {
		return int(q.Value())
	}
	if q, ok := r.Limits[name]; ok {
		return int(q.Value())
	}
	return 0
}
