package framework

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/atelier-ml/atelier/schema"
)

// ApplyPod puts a step's pod settings (schema.Pod) on its pod template:
// node selector, tolerations, priority class, service account, image pull
// secrets, labels and annotations (Atelier's own keys stay Atelier's),
// volumes mounted into the container named container, then the strategic
// merge patches in order. Errors are the user's (Invalid).
func ApplyPod(t *corev1.PodTemplateSpec, container string, p *schema.Pod) error {
	if p == nil {
		return nil
	}
	spec := &t.Spec
	if len(p.NodeSelector) > 0 {
		if spec.NodeSelector == nil {
			spec.NodeSelector = map[string]string{}
		}
		for _, k := range slices.Sorted(maps.Keys(p.NodeSelector)) {
			if _, set := spec.NodeSelector[k]; !set { // the GPU product selector wins
				spec.NodeSelector[k] = p.NodeSelector[k]
			}
		}
	}
	for _, tol := range p.Tolerations {
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: tol.Key, Operator: corev1.TolerationOperator(tol.Operator),
			Value: tol.Value, Effect: corev1.TaintEffect(tol.Effect), TolerationSeconds: tol.TolerationSeconds})
	}
	if p.PriorityClassName != "" {
		spec.PriorityClassName = p.PriorityClassName
	}
	if p.ServiceAccountName != "" {
		spec.ServiceAccountName = p.ServiceAccountName
	}
	for _, n := range p.ImagePullSecrets {
		spec.ImagePullSecrets = append(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: n})
	}
	t.Labels = mergeUser(t.Labels, p.Labels)
	t.Annotations = mergeUser(t.Annotations, p.Annotations)
	c := containerNamed(spec, container)
	for _, v := range p.Volumes {
		vol := corev1.Volume{Name: v.Name}
		switch {
		case v.PersistentVolumeClaim != "":
			vol.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.PersistentVolumeClaim, ReadOnly: v.ReadOnly}
		case v.EmptyDir != nil:
			ed := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMedium(v.EmptyDir.Medium)}
			if v.EmptyDir.SizeLimit != "" {
				q, err := resource.ParseQuantity(v.EmptyDir.SizeLimit)
				if err != nil {
					return Invalid("pod.volumes %s: sizeLimit %q is not a Kubernetes quantity", v.Name, v.EmptyDir.SizeLimit)
				}
				ed.SizeLimit = &q
			}
			vol.EmptyDir = ed
		case v.ConfigMap != "":
			vol.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: v.ConfigMap}}
		case v.Secret != "":
			vol.Secret = &corev1.SecretVolumeSource{SecretName: v.Secret}
		}
		spec.Volumes = append(spec.Volumes, vol)
		if c != nil {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: v.MountPath, ReadOnly: v.ReadOnly, SubPath: v.SubPath})
		}
	}
	patches, err := p.Patches()
	if err != nil {
		return Invalid("pod.patch: %v", err)
	}
	for i, patch := range patches {
		cur, err := json.Marshal(t)
		if err != nil {
			return err
		}
		out, err := strategicpatch.StrategicMergePatch(cur, patch, corev1.PodTemplateSpec{})
		if err != nil {
			return Invalid("pod.patch (%d): %v", i+1, err)
		}
		var next corev1.PodTemplateSpec
		if err := json.Unmarshal(out, &next); err != nil {
			return Invalid("pod.patch (%d): the patched pod template does not decode: %v", i+1, err)
		}
		// Atelier's identity labels are not the patch's to change.
		for k, v := range t.Labels {
			if strings.HasPrefix(k, "atelier.dev/") {
				if next.Labels == nil {
					next.Labels = map[string]string{}
				}
				next.Labels[k] = v
			}
		}
		*t = next
	}
	return nil
}

// mergeUser adds user's keys to own, except Atelier's (atelier.dev/).
func mergeUser(own, user map[string]string) map[string]string {
	if len(user) == 0 {
		return own
	}
	out := make(map[string]string, len(own)+len(user))
	for k, v := range user {
		if !strings.HasPrefix(k, "atelier.dev/") {
			out[k] = v
		}
	}
	for k, v := range own {
		out[k] = v
	}
	return out
}

func containerNamed(spec *corev1.PodSpec, name string) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	return nil
}

// PodPolicy is what an operator lets projects' pods do on a cluster
// (docs/operations.md "Pod settings and policy"). The zero value is the
// default: no host paths, host namespaces or privileged containers, and
// only the namespace's default service account.
type PodPolicy struct {
	// ServiceAccounts projects' steps may run as ("" and "default" are
	// always allowed).
	ServiceAccounts []string
	// Defaults are pod settings the operator gives every step pod on the
	// cluster (a toleration for its GPU nodes, a priority class, a label):
	// ApplyPodDefaults fills what the step's own settings leave unset.
	Defaults *schema.Pod
}

// SettlePod gives a pod template its settings: p (ApplyPod), then the
// operator's defaults where p left fields unset (ApplyPodDefaults).
// Step.SettlePod is it for a step's pods; a run's shared RayCluster, which
// is no step's, calls it directly.
func SettlePod(t *corev1.PodTemplateSpec, container string, p, defaults *schema.Pod) error {
	if err := ApplyPod(t, container, p); err != nil {
		return err
	}
	return ApplyPodDefaults(t, container, defaults)
}

// ApplyPodDefaults gives t the operator's defaults d where the step's own
// settings (applied before) left them unset: node selector keys and
// labels and annotations not set, the priority class and service account
// when empty, tolerations, image pull secrets and volumes (by name) added.
// The policy is checked after, so defaults are held to it too.
func ApplyPodDefaults(t *corev1.PodTemplateSpec, container string, d *schema.Pod) error {
	if d == nil {
		return nil
	}
	spec := &t.Spec
	for _, k := range slices.Sorted(maps.Keys(d.NodeSelector)) {
		if spec.NodeSelector == nil {
			spec.NodeSelector = map[string]string{}
		}
		if _, set := spec.NodeSelector[k]; !set {
			spec.NodeSelector[k] = d.NodeSelector[k]
		}
	}
	for _, tol := range d.Tolerations {
		ct := corev1.Toleration{Key: tol.Key, Operator: corev1.TolerationOperator(tol.Operator),
			Value: tol.Value, Effect: corev1.TaintEffect(tol.Effect), TolerationSeconds: tol.TolerationSeconds}
		if !slices.ContainsFunc(spec.Tolerations, func(x corev1.Toleration) bool { return x.MatchToleration(&ct) }) {
			spec.Tolerations = append(spec.Tolerations, ct)
		}
	}
	if spec.PriorityClassName == "" {
		spec.PriorityClassName = d.PriorityClassName
	}
	if spec.ServiceAccountName == "" {
		spec.ServiceAccountName = d.ServiceAccountName
	}
	for _, n := range d.ImagePullSecrets {
		if !slices.Contains(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: n}) {
			spec.ImagePullSecrets = append(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: n})
		}
	}
	t.Labels = mergeUser(t.Labels, d.Labels)
	t.Annotations = mergeUser(t.Annotations, d.Annotations)
	var extra schema.Pod
	for _, v := range d.Volumes {
		if !slices.ContainsFunc(spec.Volumes, func(x corev1.Volume) bool { return x.Name == v.Name }) {
			extra.Volumes = append(extra.Volumes, v)
		}
	}
	if len(extra.Volumes) > 0 {
		if err := ApplyPod(t, container, &extra); err != nil {
			return err
		}
	}
	if len(d.Patch) > 0 {
		return Invalid("pod defaults: a patch is not a default (it would override the step's settings); set fields instead")
	}
	return nil
}

// CheckPod refuses a pod spec that breaks the policy, naming the field and
// the rule (Invalid: the step fails for good). It is checked after the
// pod settings and their patches are applied, so a patch cannot slip past.
func (p PodPolicy) CheckPod(spec *corev1.PodSpec) error {
	if why := p.violations(spec); len(why) > 0 {
		return Invalid("the pod breaks the cluster's policy: %s", strings.Join(why, "; "))
	}
	return nil
}

// violations lists the rules spec breaks.
func (p PodPolicy) violations(spec *corev1.PodSpec) []string {
	var why []string
	add := func(format string, args ...any) { why = append(why, fmt.Sprintf(format, args...)) }
	if sa := spec.ServiceAccountName; sa != "" && sa != "default" && !slices.Contains(p.ServiceAccounts, sa) {
		add("serviceAccountName %q is not allowed on this cluster (allowed: default%s)", sa, listSuffix(p.ServiceAccounts))
	}
	// The deprecated field: the API server copies it into
	// serviceAccountName when that is empty.
	if sa := spec.DeprecatedServiceAccount; sa != "" && sa != spec.ServiceAccountName {
		add("serviceAccount (deprecated) %q: set serviceAccountName instead", sa)
	}
	if spec.NodeName != "" {
		add("nodeName %q: pods are placed by the scheduler (use nodeSelector)", spec.NodeName)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		add("hostNetwork, hostPID and hostIPC are not allowed")
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			add("volume %s: hostPath volumes are not allowed", v.Name)
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		if sc := c.SecurityContext; sc != nil {
			if sc.Privileged != nil && *sc.Privileged {
				add("container %s: privileged containers are not allowed", c.Name)
			}
			if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
				add("container %s: adding capabilities is not allowed", c.Name)
			}
		}
	}
	return why
}

// CheckPods checks every pod template of obj (Templated kinds) against the
// policy; a refusal names the pods' role.
func (p PodPolicy) CheckPods(kind Kind, obj Object) error {
	t, ok := kind.(Templated)
	if !ok {
		return nil
	}
	return p.CheckTemplates("", t.PodTemplates(obj))
}

// CheckTemplates checks pod templates against the policy; a refusal names
// the pods' role, after prefix ("rayClusters[pool] ").
func (p PodPolicy) CheckTemplates(prefix string, templates []PodTemplate) error {
	for _, pt := range templates {
		why := p.violations(&pt.Template.Spec)
		switch {
		case len(why) == 0:
		case pt.Role == "" && prefix == "":
			return Invalid("the pod breaks the cluster's policy: %s", strings.Join(why, "; "))
		default:
			return Invalid("the %s%s pods break the cluster's policy: %s", prefix, pt.Role, strings.Join(why, "; "))
		}
	}
	return nil
}

func listSuffix(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return ", " + strings.Join(s, ", ")
}
