package raycluster

import (
	"fmt"
	"strings"

	"github.com/atelier-ml/atelier/pipeline"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"

	rayclientset "github.com/ray-project/kuberay/ray-operator/pkg/client/clientset/versioned"

	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/schema"
)

// MaxNameLength is KubeRay's limit on RayCluster names (it derives Service
// and pod names from them).
const MaxNameLength = 53

// Container names KubeRay expects first in the head and worker templates.
const (
	HeadContainer   = "ray-head"
	WorkerContainer = "ray-worker"
)

// ClusterLabel is KubeRay's label naming a pod's (or a selector's) cluster.
const ClusterLabel = "ray.io/cluster"

// Resource is the RayCluster resource.
type Resource struct {
	framework.Typed[*rayv1.RayCluster, *rayv1.RayClusterList]
}

var _ framework.Resource = (*Resource)(nil)

// New returns the RayCluster resource over a KubeRay clientset.
func New(ray rayclientset.Interface) *Resource {
	return &Resource{framework.NewTyped("RayCluster", "raycluster", func(ns string) framework.Client[*rayv1.RayCluster, *rayv1.RayClusterList] {
		return ray.RayV1().RayClusters(ns)
	})}
}

// Build returns a run's shared RayCluster. meta carries its name,
// namespace and identity labels; env the run's ATELIER_* variables;
// defaults the cluster operator's pod settings.
func Build(meta metav1.ObjectMeta, c pipeline.SharedRayCluster, env []corev1.EnvVar, defaults *schema.Pod) (*rayv1.RayCluster, error) {
	if c.Name == "" {
		return nil, fmt.Errorf("a shared Ray cluster needs a name")
	}
	// No secrets: the cluster is the run's, and its pods outlive any step.
	s, err := Spec(c.RayClusterTemplate, env, meta.Labels, defaults, "rayClusters["+c.Name+"]", framework.Secrets{})
	if err != nil {
		return nil, err
	}
	return &rayv1.RayCluster{ObjectMeta: meta, Spec: *s}, nil
}

// State is what EnsureRayCluster waits for.
type State struct {
	Ready  bool
	Failed bool
	Reason string
	Links  map[string]string
}

// ReadState reads a RayCluster's status.state: "ready" is ready; "failed"
// (deprecated, but still written by KubeRay for unrecoverable errors) is
// failure; anything else — "", "suspended", a head pod not found yet — means
// keep waiting.
func ReadState(c *rayv1.RayCluster) State {
	s := State{Reason: c.Status.Reason}
	switch c.Status.State {
	case rayv1.Ready:
		s.Ready = true
	case rayv1.Failed:
		s.Failed = true
	}
	if svc, port := c.Status.Head.ServiceName, c.Status.Endpoints["dashboard"]; svc != "" && port != "" {
		s.Links = map[string]string{"dashboard": "http://" + svc + "." + c.Namespace + ".svc:" + port}
	}
	return s
}

// Spec builds a RayCluster spec from a template: one head (dashboard bound
// to all interfaces so the dashboard link and `ray job submit` work from
// outside the pod), and one worker group per template group. Every
// container gets env and the step's secrets (a ray step's own cluster:
// variables from secretKeyRefs, files from a volume of the attempt's
// Secret; none for a shared cluster); every pod gets podLabels, the
// template's pod settings (t.Pod under t.HeadPod or the group's Pod) and
// then the operator's defaults. field names the template in error
// messages.
func Spec(t pipeline.RayClusterTemplate, env []corev1.EnvVar, podLabels map[string]string, defaults *schema.Pod, field string, secrets framework.Secrets) (*rayv1.RayClusterSpec, error) {
	if t.Image == "" {
		return nil, fmt.Errorf("%s.image: a Ray cluster on Kubernetes needs an image (e.g. rayproject/ray:2.46.0)", field)
	}
	headRes, headSel, err := framework.Requirements(&t.Head, field+".head")
	if err != nil {
		return nil, err
	}
	s := &rayv1.RayClusterSpec{
		RayVersion: t.RayVersion,
		HeadGroupSpec: rayv1.HeadGroupSpec{
			RayStartParams: map[string]string{"dashboard-host": "0.0.0.0"},
			Template:       podTemplate(HeadContainer, t.Image, headRes, headSel, env, podLabels),
		},
	}
	framework.AddSecrets(&s.HeadGroupSpec.Template.Spec, HeadContainer, secrets.Refs, secrets.Name)
	if err := framework.SettlePod(&s.HeadGroupSpec.Template, HeadContainer, schema.MergePod(t.Pod, t.HeadPod), defaults); err != nil {
		return nil, fmt.Errorf("%s head pod: %w", field, err)
	}
	seen := map[string]bool{}
	for i, g := range t.Workers {
		gf := fmt.Sprintf("%s.workers[%d]", field, i)
		// KubeRay names worker pods "<cluster>-<group>-worker-<suffix>".
		if errs := validation.IsDNS1123Label(g.Name); len(errs) > 0 {
			return nil, fmt.Errorf("%s.name: %q is not a valid worker group name (lowercase letters, digits and '-'): %s", gf, g.Name, strings.Join(errs, "; "))
		}
		if seen[g.Name] {
			return nil, fmt.Errorf("%s.name: worker group %q appears twice", gf, g.Name)
		}
		seen[g.Name] = true
		if g.Replicas < 0 || g.MinReplicas < 0 || g.MaxReplicas < 0 {
			return nil, fmt.Errorf("%s: replicas, minReplicas and maxReplicas must not be negative", gf)
		}
		maxR := g.MaxReplicas
		if maxR == 0 {
			// Unset: no autoscaling room beyond what was asked for.
			maxR = max(g.Replicas, g.MinReplicas)
		}
		if g.MinReplicas > maxR || g.Replicas > maxR || g.Replicas < g.MinReplicas {
			return nil, fmt.Errorf("%s: need minReplicas (%d) <= replicas (%d) <= maxReplicas (%d)", gf, g.MinReplicas, g.Replicas, maxR)
		}
		res, sel, err := framework.Requirements(&g.Resources, gf)
		if err != nil {
			return nil, err
		}
		tmpl := podTemplate(WorkerContainer, t.Image, res, sel, env, podLabels)
		framework.AddSecrets(&tmpl.Spec, WorkerContainer, secrets.Refs, secrets.Name)
		if err := framework.SettlePod(&tmpl, WorkerContainer, schema.MergePod(t.Pod, g.Pod), defaults); err != nil {
			return nil, fmt.Errorf("%s pods: %w", gf, err)
		}
		s.WorkerGroupSpecs = append(s.WorkerGroupSpecs, rayv1.WorkerGroupSpec{
			GroupName:      g.Name,
			Replicas:       ptr.To(g.Replicas),
			MinReplicas:    ptr.To(g.MinReplicas),
			MaxReplicas:    ptr.To(maxR),
			RayStartParams: map[string]string{},
			Template:       tmpl,
		})
	}
	return s, nil
}

// PodTemplates lists the pod templates of a RayCluster spec, for the
// cluster's policy check (framework.Templated).
func PodTemplates(s *rayv1.RayClusterSpec) []framework.PodTemplate {
	out := []framework.PodTemplate{{Role: "head", Template: &s.HeadGroupSpec.Template}}
	for i := range s.WorkerGroupSpecs {
		g := &s.WorkerGroupSpecs[i]
		out = append(out, framework.PodTemplate{Role: "workers[" + g.GroupName + "]", Template: &g.Template})
	}
	return out
}

func podTemplate(container, image string, res corev1.ResourceRequirements, nodeSelector map[string]string,
	env []corev1.EnvVar, labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: framework.MergeLabels(labels, nil)},
		Spec: corev1.PodSpec{
			NodeSelector: nodeSelector,
			Containers: []corev1.Container{{
				Name:      container,
				Image:     image,
				Resources: res,
				Env:       append([]corev1.EnvVar(nil), env...),
			}},
		},
	}
}
