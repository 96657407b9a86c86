package serving

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// Quotas reads a project's GPU policy (the catalogue); catalog.ErrNotFound
// when the project has none.
type Quotas interface {
	GetGPUPolicy(ctx context.Context, project string) (catalog.GPUPolicy, error)
}

// WithQuotas makes Headroom check GPU quotas (without it, it answers
// "not limited").
func WithQuotas(q Quotas) Option { return func(s *Serving) { s.quotas = q } }

// unlimitedHeadroom stands for a quota without a borrowing bound.
const unlimitedHeadroom = 1 << 30

// Headroom answers the project's GPU headroom on this cluster: for each
// GPU type its policy lists, nominal plus borrowing limit, less the GPUs
// its live pods request (endpoint replicas and admitted steps alike). It
// is the same quota GPU admission enforces for steps, read as a ceiling:
// whether the cohort can lend that much right now is admission's business.
func (s *Serving) Headroom(ctx context.Context, ref activities.EndpointRef) (activities.EndpointHeadroom, error) {
	var out activities.EndpointHeadroom
	if err := checkEndpoint(ref.Project, ref.Endpoint); err != nil {
		return out, err
	}
	if s.quotas == nil {
		return out, nil
	}
	pol, err := s.quotas.GetGPUPolicy(ctx, ref.Project)
	if errors.Is(err, catalog.ErrNotFound) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("read the GPU policy of project %q: %w", ref.Project, err)
	}
	ns, err := s.namespace(ref.Project)
	if err != nil {
		return out, err
	}
	pods, err := s.clients.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return out, framework.WrapAPI(err, "list pods of %s", ns)
	}
	used, err := s.gpusUsed(ctx, pods.Items)
	if err != nil {
		return out, err
	}
	out.Limited = true
	for _, q := range pol.Quotas {
		limit := q.Nominal + int(q.BorrowingLimit)
		if q.BorrowingLimit == gpu.Unlimited {
			limit = unlimitedHeadroom
		}
		out.Headroom = append(out.Headroom, inference.GPUAmount{Type: q.Resource, GPUs: max(0, limit-used[q.Resource])})
	}
	for t, n := range used {
		out.Used = append(out.Used, inference.GPUAmount{Type: t, GPUs: n})
	}
	slices.SortFunc(out.Used, func(a, b inference.GPUAmount) int { return cmp.Compare(a.Type, b.Type) })
	return out, nil
}

// gpusUsed sums live pods' GPU and MIG requests by type. A whole GPU's
// type is the product the pod selects, else its node's product label.
func (s *Serving) gpusUsed(ctx context.Context, pods []corev1.Pod) (map[gpu.Resource]int, error) {
	used := map[gpu.Resource]int{}
	products := map[string]gpu.Resource{} // node → product
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range p.Spec.Containers {
			for name, q := range requests(c.Resources) {
				switch {
				case name == gpu.ResourceGPU:
					t, err := s.productOf(ctx, p, products)
					if err != nil {
						return nil, err
					}
					used[t] += int(q)
				case strings.HasPrefix(string(name), gpu.ResourceMIGPrefix):
					used[gpu.Resource(name)] += int(q)
				}
			}
		}
	}
	return used, nil
}

// requests is a container's requests, limits standing in for missing
// requests of extended resources (they must be equal).
func requests(r corev1.ResourceRequirements) map[corev1.ResourceName]int64 {
	out := map[corev1.ResourceName]int64{}
	for n, q := range r.Limits {
		out[n] = q.Value()
	}
	for n, q := range r.Requests {
		out[n] = q.Value()
	}
	return out
}

func (s *Serving) productOf(ctx context.Context, p *corev1.Pod, cache map[string]gpu.Resource) (gpu.Resource, error) {
	if v := p.Spec.NodeSelector[gpu.LabelGPUProduct]; v != "" {
		return gpu.Resource(v), nil
	}
	if p.Spec.NodeName == "" {
		return "", nil // pending without a product: counted as "any"
	}
	if t, ok := cache[p.Spec.NodeName]; ok {
		return t, nil
	}
	n, err := s.clients.Kube.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return "", framework.WrapAPI(err, "get node %s", p.Spec.NodeName)
	}
	t := gpu.Resource(n.Labels[gpu.LabelGPUProduct])
	cache[p.Spec.NodeName] = t
	return t, nil
}
