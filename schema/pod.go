package schema

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Pod holds Kubernetes settings of the pods Atelier makes for a user's
// document: a container step's Job, a Ray step's head and workers, a
// Spark step's driver and executors, an endpoint's replicas. It says where
// they may run (node selector, tolerations, priority class), who they run
// as (service account, image pull secrets), what they mount (volumes), how
// they are labelled, and a strategic merge patch of the pod template for
// what none of these say. Narrower settings override wider ones field by
// field (MergePod); they apply on Kubernetes only, and the cluster's
// worker checks the result against the operator's policy (no host paths,
// no privileged containers, no host namespaces, service accounts from an
// allow-list).
type Pod struct {
	NodeSelector       map[string]string `json:"nodeSelector,omitempty"`
	Tolerations        []Toleration      `json:"tolerations,omitempty"`
	PriorityClassName  string            `json:"priorityClassName,omitempty"`
	ServiceAccountName string            `json:"serviceAccountName,omitempty"`
	ImagePullSecrets   []string          `json:"imagePullSecrets,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
	Annotations        map[string]string `json:"annotations,omitempty"`
	Volumes            []Volume          `json:"volumes,omitempty"`
	// Patch is a strategic merge patch of the pod template (a JSON object,
	// the shape of a Kubernetes PodTemplateSpec), applied last.
	Patch json.RawMessage `json:"patch,omitempty"`
}

// Toleration lets the pod run on nodes with a matching taint.
type Toleration struct {
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator,omitempty"` // Equal (default) or Exists
	Value    string `json:"value,omitempty"`
	Effect   string `json:"effect,omitempty"` // NoSchedule, PreferNoSchedule, NoExecute; empty: all
	// TolerationSeconds bounds how long a NoExecute taint is tolerated.
	TolerationSeconds *int64 `json:"tolerationSeconds,omitempty"`
}

// Volume is a volume of the pod mounted into the step's container at
// MountPath: exactly one source is set.
type Volume struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
	SubPath   string `json:"subPath,omitempty"`
	// PersistentVolumeClaim names an existing claim of the project's
	// namespace.
	PersistentVolumeClaim string `json:"persistentVolumeClaim,omitempty"`
	// EmptyDir is scratch space that lives as long as the pod.
	EmptyDir *EmptyDir `json:"emptyDir,omitempty"`
	// ConfigMap and Secret name existing objects of the project's
	// namespace (a project secret is referenced with container.secrets).
	ConfigMap string `json:"configMap,omitempty"`
	Secret    string `json:"secret,omitempty"`
}

// EmptyDir is a pod's scratch volume.
type EmptyDir struct {
	Medium    string `json:"medium,omitempty"` // "" (node disk) or Memory
	SizeLimit string `json:"sizeLimit,omitempty"`
}

// MergePod returns base overridden by over: scalars of over win when set,
// maps merge (over wins on a key), lists concatenate (volumes by name:
// over's replace base's of the same name), patches both apply (base's
// first: over's is applied by the step after it, see Patches).
func MergePod(base, over *Pod) *Pod {
	if base == nil {
		return over
	}
	if over == nil {
		return base
	}
	out := *base
	out.NodeSelector = mergeMap(base.NodeSelector, over.NodeSelector)
	out.Labels = mergeMap(base.Labels, over.Labels)
	out.Annotations = mergeMap(base.Annotations, over.Annotations)
	out.Tolerations = append(slices.Clone(base.Tolerations), over.Tolerations...)
	out.ImagePullSecrets = append(slices.Clone(base.ImagePullSecrets), over.ImagePullSecrets...)
	if over.PriorityClassName != "" {
		out.PriorityClassName = over.PriorityClassName
	}
	if over.ServiceAccountName != "" {
		out.ServiceAccountName = over.ServiceAccountName
	}
	out.Volumes = nil
	for _, v := range base.Volumes {
		if !slices.ContainsFunc(over.Volumes, func(o Volume) bool { return o.Name == v.Name }) {
			out.Volumes = append(out.Volumes, v)
		}
	}
	out.Volumes = append(out.Volumes, over.Volumes...)
	if len(over.Patch) > 0 {
		if len(base.Patch) > 0 {
			// Both apply, the wider one's first: one flat JSON list of
			// every patch, however many levels merged (a pipeline's, a
			// Ray cluster's, its head's).
			bp, berr := base.Patches()
			op, oerr := over.Patches()
			if berr != nil || oerr != nil {
				// Not valid JSON: kept as written, for ApplyPod to report.
				out.Patch = json.RawMessage(`[` + string(base.Patch) + `,` + string(over.Patch) + `]`)
			} else {
				b, _ := json.Marshal(append(bp, op...))
				out.Patch = b
			}
		} else {
			out.Patch = over.Patch
		}
	}
	return &out
}

// IsZero reports whether p sets nothing (`pod: {}`).
func (p *Pod) IsZero() bool {
	return p == nil || len(p.NodeSelector) == 0 && len(p.Tolerations) == 0 && p.PriorityClassName == "" &&
		p.ServiceAccountName == "" && len(p.ImagePullSecrets) == 0 && len(p.Labels) == 0 &&
		len(p.Annotations) == 0 && len(p.Volumes) == 0 && len(p.Patch) == 0
}

// Patches returns the strategic merge patches to apply in order (Patch is
// one object, or a list of them after MergePod).
func (p *Pod) Patches() ([]json.RawMessage, error) {
	if p == nil || len(p.Patch) == 0 {
		return nil, nil
	}
	t := strings.TrimSpace(string(p.Patch))
	if strings.HasPrefix(t, "[") {
		var list []json.RawMessage
		if err := json.Unmarshal(p.Patch, &list); err != nil {
			return nil, err
		}
		return list, nil
	}
	return []json.RawMessage{p.Patch}, nil
}

func mergeMap(a, b map[string]string) map[string]string {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// ValidatePod checks pod settings written at path pp: every problem with
// its path. The Kubernetes API server checks the rendered pod again (and
// the cluster's worker the operator's policy); this catches what can be
// said before a run starts or an endpoint is applied.
func ValidatePod(pp string, p *Pod) []Problem {
	if p == nil {
		return nil
	}
	ps := &podProblems{}
	keys := func(f string, m map[string]string, labels bool) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			kp := key(field(pp, f), k)
			if !labelKeyRE.MatchString(k) {
				ps.add(kp, "%q is not a Kubernetes label key", k)
			}
			if strings.HasPrefix(k, "atelier.dev/") {
				ps.add(kp, "atelier.dev/ keys are set by Atelier")
			}
			if labels && (len(m[k]) > 63 || !labelValueRE.MatchString(m[k])) {
				ps.add(kp, "%q is not a Kubernetes label value (at most 63 letters, digits, '-', '_', '.')", m[k])
			}
		}
	}
	keys("nodeSelector", p.NodeSelector, true)
	keys("labels", p.Labels, true)
	keys("annotations", p.Annotations, false)
	for i, t := range p.Tolerations {
		tp := index(field(pp, "tolerations"), i)
		switch t.Operator {
		case "", "Equal":
			if t.Key == "" {
				ps.add(field(tp, "key"), "required with operator Equal")
			}
		case "Exists":
			if t.Value != "" {
				ps.add(field(tp, "value"), "must be empty with operator Exists")
			}
		default:
			ps.add(field(tp, "operator"), "%q is not Equal or Exists", t.Operator)
		}
		if !slices.Contains([]string{"", "NoSchedule", "PreferNoSchedule", "NoExecute"}, t.Effect) {
			ps.add(field(tp, "effect"), "%q is not NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
		}
		if t.TolerationSeconds != nil && t.Effect != "NoExecute" {
			ps.add(field(tp, "tolerationSeconds"), "applies only with effect NoExecute")
		}
	}
	for _, f := range []struct{ name, v string }{{"priorityClassName", p.PriorityClassName}, {"serviceAccountName", p.ServiceAccountName}} {
		if f.v != "" && !dnsSubdomainRE.MatchString(f.v) {
			ps.add(field(pp, f.name), "%q is not a Kubernetes object name", f.v)
		}
	}
	for i, n := range p.ImagePullSecrets {
		if !dnsSubdomainRE.MatchString(n) {
			ps.add(index(field(pp, "imagePullSecrets"), i), "%q is not a Kubernetes Secret name", n)
		}
	}
	names := map[string]bool{}
	mounts := map[string]bool{}
	for i, v := range p.Volumes {
		vp := index(field(pp, "volumes"), i)
		switch {
		case len(v.Name) > 63 || !dnsLabelRE.MatchString(v.Name):
			ps.add(field(vp, "name"), "%q is not a volume name (a DNS label)", v.Name)
		case names[v.Name]:
			ps.add(field(vp, "name"), "%s is given twice", v.Name)
		}
		names[v.Name] = true
		switch {
		case !path.IsAbs(v.MountPath):
			ps.add(field(vp, "mountPath"), "must be an absolute path, got %q", v.MountPath)
		case mounts[path.Clean(v.MountPath)]:
			ps.add(field(vp, "mountPath"), "%s is mounted twice", v.MountPath)
		}
		mounts[path.Clean(v.MountPath)] = true
		if strings.Contains(v.SubPath, "..") || path.IsAbs(v.SubPath) {
			ps.add(field(vp, "subPath"), "must be a relative path inside the volume")
		}
		n := 0
		for _, set := range []bool{v.PersistentVolumeClaim != "", v.EmptyDir != nil, v.ConfigMap != "", v.Secret != ""} {
			if set {
				n++
			}
		}
		if n != 1 {
			ps.add(vp, "set exactly one of persistentVolumeClaim, emptyDir, configMap, secret (got %d)", n)
		}
		for _, f := range []struct{ name, v string }{{"persistentVolumeClaim", v.PersistentVolumeClaim}, {"configMap", v.ConfigMap}, {"secret", v.Secret}} {
			if f.v != "" && !dnsSubdomainRE.MatchString(f.v) {
				ps.add(field(vp, f.name), "%q is not a Kubernetes object name", f.v)
			}
		}
		if v.EmptyDir != nil && v.EmptyDir.Medium != "" && v.EmptyDir.Medium != "Memory" {
			ps.add(field(field(vp, "emptyDir"), "medium"), "%q is not \"\" or Memory", v.EmptyDir.Medium)
		}
	}
	if len(p.Patch) > 0 {
		var obj map[string]any
		if err := json.Unmarshal(p.Patch, &obj); err != nil {
			ps.add(field(pp, "patch"), "must be an object (a strategic merge patch of the pod template): %v", err)
		}
	}
	return ps.list
}

var (
	dnsSubdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	dnsLabelRE     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	labelKeyRE     = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	labelValueRE   = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
	podKeyIdentRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// podProblems collects findings the way the documents' validators write
// paths: "pod.tolerations[0].key", `pod.labels["app.kubernetes.io/name"]`.
type podProblems struct{ list []Problem }

func (ps *podProblems) add(path, format string, args ...any) {
	ps.list = append(ps.list, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func field(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func key(path, k string) string {
	if podKeyIdentRE.MatchString(k) {
		return field(path, k)
	}
	return path + "[" + strconv.Quote(k) + "]"
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }
