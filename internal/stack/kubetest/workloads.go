package kubetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	rayclient "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned"
)

// Exit is what the program in a pod does: exit with Code after running
// for After, leaving Message as its termination message (where Atelier
// reads outputs); or, with Never, run until the pod is deleted.
type Exit struct {
	Code    int
	After   time.Duration
	Message string
	Never   bool
}

// PodRef identifies a pod Workloads saw. Kind is "rayjob" for a KubeRay
// submitter pod (its container is ray-job-submitter: the Ray job runs as
// long as it does), else "job".
type PodRef struct {
	Kind, Namespace, Name string
	Labels                map[string]string
}

// Workloads plays, on a StartControlPlane cluster, the programs inside the
// containers of Atelier's step pods: the pods the Job controller makes for
// container steps and the submitter pods KubeRay makes for ray steps (pods
// labelled atelier.dev/managed-by=atelier with a Job name). Everything
// else is real — the controllers create, schedule, run (kwok), finish and
// delete them. For each new pod it asks Script what the program does and
// writes that as the kwok contract's annotations (see AnnotationExitCode).
// Ray head and worker pods are not touched: they run until deleted, like
// servers; nor are pods that select the real node (RealNodePod), whose
// containers really run.
//
// It also counts, per step attempt, the distinct objects (Jobs, RayJobs)
// ever created for it (ObjectsPerAttempt).
type Workloads struct {
	kube kubernetes.Interface
	ray  rayclient.Interface
	// Script decides each pod's exit (default: exit 0 after 200ms with
	// outputs {"ok":true}).
	Script func(PodRef) Exit

	mu   sync.Mutex
	seen map[types.UID]bool
	uids map[string]map[types.UID]bool // attempt key -> object UIDs
}

// NewWorkloads connects to the cluster.
func NewWorkloads(cfg *rest.Config) (*Workloads, error) {
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	r, err := rayclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Workloads{kube: k, ray: r, seen: map[types.UID]bool{}, uids: map[string]map[types.UID]bool{}}, nil
}

// Run watches all namespaces until ctx ends.
func (w *Workloads) Run(ctx context.Context) {
	go watchLoop(ctx, func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
		lo.LabelSelector = managedSelector + ",batch.kubernetes.io/job-name"
		return w.kube.CoreV1().Pods("").Watch(ctx, lo)
	}, func(obj metav1.Object) {
		if p, ok := obj.(*corev1.Pod); ok {
			w.pod(ctx, p)
		}
	})
	count := func(obj metav1.Object) {
		if slices.ContainsFunc(obj.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.Kind == "RayJob" }) {
			return // a KubeRay submitter Job: part of its RayJob
		}
		w.count(obj)
	}
	go watchLoop(ctx, func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
		lo.LabelSelector = managedSelector
		return w.kube.BatchV1().Jobs("").Watch(ctx, lo)
	}, count)
	go watchLoop(ctx, func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
		lo.LabelSelector = managedSelector
		return w.ray.RayV1().RayJobs("").Watch(ctx, lo)
	}, count)
}

// watchLoop feeds every object event to f until ctx ends, re-watching
// after interruptions.
func watchLoop(ctx context.Context, w func(context.Context, metav1.ListOptions) (watch.Interface, error), f func(metav1.Object)) {
	for ctx.Err() == nil {
		wi, err := w(ctx, metav1.ListOptions{})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Deleted || ev.Type == watch.Error {
				continue
			}
			if obj, ok := ev.Object.(metav1.Object); ok {
				f(obj)
			}
		}
	}
}

func (w *Workloads) count(obj metav1.Object) {
	l := obj.GetLabels()
	key := fmt.Sprintf("%s/%s/%s/%s", l["atelier.dev/run"], l["atelier.dev/step"], l["atelier.dev/item"], l["atelier.dev/attempt"])
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.uids[key] == nil {
		w.uids[key] = map[types.UID]bool{}
	}
	w.uids[key][obj.GetUID()] = true
}

// ObjectsPerAttempt returns, per step attempt (run/step/item/attempt), how
// many distinct Jobs or RayJobs were ever created for it.
func (w *Workloads) ObjectsPerAttempt() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for k, v := range w.uids {
		out[k] = len(v)
	}
	return out
}

func (w *Workloads) pod(ctx context.Context, p *corev1.Pod) {
	if p.DeletionTimestamp != nil {
		return
	}
	if p.Spec.NodeSelector[RealNodeLabel] == "true" {
		return // for the real node: its program really runs
	}
	if _, ok := p.Annotations[AnnotationExitCode]; ok {
		return
	}
	w.mu.Lock()
	first := !w.seen[p.UID]
	w.seen[p.UID] = true
	w.mu.Unlock()
	if !first {
		return
	}
	ref := PodRef{Kind: "job", Namespace: p.Namespace, Name: p.Name, Labels: p.Labels}
	if slices.ContainsFunc(p.Spec.Containers, func(c corev1.Container) bool { return c.Name == "ray-job-submitter" }) {
		ref.Kind = "rayjob"
	}
	ex := Exit{After: 200 * time.Millisecond, Message: `{"ok":true}`}
	if w.Script != nil {
		ex = w.Script(ref)
	}
	if ex.Never {
		return
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ExitAnnotations(ex.Code, ex.After, ex.Message)}})
	if err != nil {
		return
	}
	// NotFound: deleted meanwhile (a cancelled step), nothing to play.
	_, _ = w.kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
}
