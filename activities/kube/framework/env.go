package framework

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/atelier-ml/atelier/pipeline"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/atelier-ml/atelier/activities"
)

// OutputsPath is where a step writes its outputs on Kubernetes: the
// container's termination message file, which the kubelet copies into the
// pod's status when the container exits (at most 4 KiB).
const OutputsPath = corev1.TerminationMessagePathDefault

// Resource names and node labels used for GPUs.
const (
	GPUResource   corev1.ResourceName = "nvidia.com/gpu"
	GPUProductKey                     = "nvidia.com/gpu.product"
)

// StepEnv returns the ATELIER_* variables of an attempt, sorted by name.
func StepEnv(req activities.KubeStepRequest) []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: "ATELIER_ATTEMPT", Value: strconv.Itoa(req.Attempt)},
	}
	if req.Item != nil {
		env = append(env, corev1.EnvVar{Name: "ATELIER_ITEM", Value: strconv.Itoa(*req.Item)})
	}
	env = append(env,
		corev1.EnvVar{Name: "ATELIER_OUTPUTS", Value: OutputsPath},
		corev1.EnvVar{Name: "ATELIER_PROJECT", Value: req.Project},
		corev1.EnvVar{Name: "ATELIER_RUN_ID", Value: req.RunID},
		corev1.EnvVar{Name: "ATELIER_STEP", Value: req.Step},
	)
	return env
}

// RunEnv returns the ATELIER_* variables of objects that belong to a run
// but not to one step (a shared RayCluster), sorted by name.
func RunEnv(project, run string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "ATELIER_OUTPUTS", Value: OutputsPath},
		{Name: "ATELIER_PROJECT", Value: project},
		{Name: "ATELIER_RUN_ID", Value: run},
	}
}

// ContainerEnv merges a step's own variables (sorted) with the runtime's;
// the runtime's win, so a step cannot spoof its identity or move its
// outputs file, and no name appears twice (pod env lists are keyed by name).
func ContainerEnv(user map[string]string, runtime []corev1.EnvVar) []corev1.EnvVar {
	reserved := make(map[string]bool, len(runtime))
	for _, e := range runtime {
		reserved[e.Name] = true
	}
	out := make([]corev1.EnvVar, 0, len(user)+len(runtime))
	for _, k := range slices.Sorted(maps.Keys(user)) {
		if !reserved[k] {
			out = append(out, corev1.EnvVar{Name: k, Value: user[k]})
		}
	}
	return append(out, runtime...)
}

// EnvMap returns env as a map, for APIs that take one.
func EnvMap(env []corev1.EnvVar) map[string]string {
	m := make(map[string]string, len(env))
	for _, e := range env {
		m[e.Name] = e.Value
	}
	return m
}

// Requirements turns spec resources into container requirements: CPU and
// memory requests equal to limits (Guaranteed QoS for those, so a step is
// not evicted or throttled below what it asked for), GPUs as nvidia.com/gpu
// limits (extended resources default their request to the limit). It also
// returns the node selector a GPU type implies. field names the spec field
// in error messages.
func Requirements(r *pipeline.Resources, field string) (corev1.ResourceRequirements, map[string]string, error) {
	var req corev1.ResourceRequirements
	if r == nil {
		return req, nil, nil
	}
	set := func(name corev1.ResourceName, q resource.Quantity) {
		if req.Limits == nil {
			req.Limits = corev1.ResourceList{}
		}
		req.Limits[name] = q
		if name != GPUResource {
			if req.Requests == nil {
				req.Requests = corev1.ResourceList{}
			}
			req.Requests[name] = q
		}
	}
	for _, x := range []struct {
		name  corev1.ResourceName
		value string
		what  string
	}{{corev1.ResourceCPU, r.CPU, "cpu"}, {corev1.ResourceMemory, r.Memory, "memory"}} {
		if x.value == "" {
			continue
		}
		q, err := resource.ParseQuantity(x.value)
		if err != nil {
			return req, nil, fmt.Errorf("%s.%s: %q is not a Kubernetes quantity (examples: \"500m\", \"2\", \"4Gi\")", field, x.what, x.value)
		}
		if q.Sign() <= 0 {
			return req, nil, fmt.Errorf("%s.%s: must be positive, got %q", field, x.what, x.value)
		}
		set(x.name, q)
	}
	if r.GPU < 0 {
		return req, nil, fmt.Errorf("%s.gpu: must not be negative, got %d", field, r.GPU)
	}
	if r.GPU > 0 {
		set(GPUResource, *resource.NewQuantity(int64(r.GPU), resource.DecimalSI))
	}
	return req, GPUNodeSelector(r.GPUType), nil
}

// GPUNodeSelector selects nodes with the given GPU product; nil for any.
func GPUNodeSelector(gpuType string) map[string]string {
	if gpuType == "" {
		return nil
	}
	return map[string]string{GPUProductKey: gpuType}
}

// NodeAffinity requires one of nodes, by name (the matchFields form
// DaemonSets use, which needs no hostname label); nil for no nodes.
func NodeAffinity(nodes []string) *corev1.Affinity {
	if len(nodes) == 0 {
		return nil
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: slices.Clone(nodes),
				}},
			}},
		},
	}}
}

// PinGPUPods restricts a pod that requests GPUs to the nodes GPU admission
// chose for the step (KubeStepRequest.Nodes), so the capacity admission
// counted is the capacity the pod gets. Pods without GPUs (a Ray head
// doing no GPU work) go wherever the scheduler puts them.
func PinGPUPods(spec *corev1.PodSpec, nodes []string) {
	if len(nodes) == 0 {
		return
	}
	for _, c := range spec.Containers {
		if q, ok := c.Resources.Limits[GPUResource]; ok && !q.IsZero() {
			spec.Affinity = NodeAffinity(nodes)
			return
		}
	}
}

// SecretEnv is the environment of a container's secret references: each
// variable read from the attempt's Secret (secretName), keyed by the
// project secret's name.
func SecretEnv(refs []pipeline.SecretEnv, secretName string) []corev1.EnvVar {
	if len(refs) == 0 || secretName == "" {
		return nil
	}
	var out []corev1.EnvVar
	for _, r := range refs {
		if r.Env == "" {
			continue // a file (SecretFiles)
		}
		out = append(out, corev1.EnvVar{Name: r.Env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secretName}, Key: r.Name}}})
	}
	if HasSecretFiles(refs) {
		out = append(out, corev1.EnvVar{Name: "ATELIER_SECRETS", Value: pipeline.SecretsDir})
	}
	return out
}

// HasSecretFiles reports whether refs give any secret as a file.
func HasSecretFiles(refs []pipeline.SecretEnv) bool {
	for _, r := range refs {
		if r.File != "" {
			return true
		}
	}
	return false
}

// SecretFilesVolume is the volume and mount that put the step's secret
// files ({file: ...} references) at pipeline.SecretsDir, from the
// attempt's Secret, readable by the pod's user only (0400); ok is false
// when the step has none.
func SecretFilesVolume(refs []pipeline.SecretEnv, secretName string) (corev1.Volume, corev1.VolumeMount, bool) {
	if secretName == "" || !HasSecretFiles(refs) {
		return corev1.Volume{}, corev1.VolumeMount{}, false
	}
	src := &corev1.SecretVolumeSource{SecretName: secretName, DefaultMode: ptrInt32(0o400)}
	for _, r := range refs {
		if r.File != "" {
			src.Items = append(src.Items, corev1.KeyToPath{Key: r.Name, Path: r.File})
		}
	}
	const name = "atelier-secrets"
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: src}},
		corev1.VolumeMount{Name: name, MountPath: pipeline.SecretsDir, ReadOnly: true}, true
}

func ptrInt32(v int32) *int32 { return &v }

// AddSecrets gives the container named container of spec the step's
// secret references, read from the attempt's Secret (secretName): each
// variable from a secretKeyRef (SecretEnv) and the files as the
// read-only volume at pipeline.SecretsDir (SecretFilesVolume). Nothing
// changes when the step references no secret or spec has no such
// container.
func AddSecrets(spec *corev1.PodSpec, container string, refs []pipeline.SecretEnv, secretName string) {
	c := containerNamed(spec, container)
	if c == nil {
		return
	}
	c.Env = append(c.Env, SecretEnv(refs, secretName)...)
	if vol, mount, ok := SecretFilesVolume(refs, secretName); ok {
		spec.Volumes = append(spec.Volumes, vol)
		c.VolumeMounts = append(c.VolumeMounts, mount)
	}
}

// Secrets are a step's secret references and the attempt's Secret that
// holds their values (Step.SecretName), for builders that hand them on;
// the zero value is none.
type Secrets struct {
	Refs []pipeline.SecretEnv
	Name string
}
