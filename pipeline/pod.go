package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/atelier-ml/atelier/schema"
)

// EffectivePod merges the pipeline's pod settings (p.Pod) under the
// step's container's: what the step's pod gets. nil when neither sets any.
func (s *Step) EffectivePod(p *Spec) *schema.Pod {
	var own *schema.Pod
	if s.Container != nil {
		own = s.Container.Pod
	}
	var def *schema.Pod
	if p != nil {
		def = p.Pod
	}
	return schema.MergePod(def, own)
}

// validatePod adds the problems of pod settings written at pp.
func validatePod(pp string, p *schema.Pod, ps *problems) {
	ps.list = append(ps.list, schema.ValidatePod(pp, p)...)
}

// podHasTemplates reports whether pod settings hold a template: none is
// rendered (the settings are literal, checked before the run).
func podHasTemplates(p *schema.Pod) bool {
	if p == nil {
		return false
	}
	b, _ := json.Marshal(p)
	return strings.Contains(string(b), "{{")
}

// ApplyPodDefaults gives every Kubernetes step (exit handlers too) and
// every shared Ray cluster the pipeline's pod settings (Spec.Pod) under
// its own, so that what runs a step, in the pipeline workflow or a batch
// of a wide forEach, needs only the step: a container's pod
// (EffectivePod), a ray step's or shared cluster's pods (RayClusterTemplate.Pod,
// under which HeadPod and the groups' Pod still apply) and a spark step's
// (SparkStep.Pod, under the roles'), without the pipeline's patch, which
// is the container steps' only. An inference step's endpoint keeps its
// own spec: it outlives the run. The spec's own blocks are not modified:
// each is copied.
func (p *Spec) ApplyPodDefaults() {
	if p.Pod == nil {
		return
	}
	// The pipeline's patch is the container steps' only: a patch names
	// containers, and a Ray or Spark pod's have other names (it would add
	// a container without an image to each).
	fields := *p.Pod
	fields.Patch = nil
	wide := &fields
	for _, steps := range [][]Step{p.Steps, p.OnExit} {
		for i := range steps {
			s := &steps[i]
			switch {
			case s.Container != nil:
				c := *s.Container
				c.Pod = s.EffectivePod(p)
				s.Container = &c
			case s.Ray != nil:
				r := *s.Ray
				r.Pod = schema.MergePod(wide, r.Pod)
				s.Ray = &r
			case s.Spark != nil:
				sp := *s.Spark
				sp.Pod = schema.MergePod(wide, sp.Pod)
				s.Spark = &sp
			}
		}
	}
	if len(p.RayClusters) > 0 {
		clusters := slices.Clone(p.RayClusters)
		for i := range clusters {
			clusters[i].Pod = schema.MergePod(wide, clusters[i].Pod)
		}
		p.RayClusters = clusters
	}
}

// ParsePodDefaults reads an operator's pod defaults for a cluster (a YAML
// or JSON Pod, the shape of a step's `pod`), as strictly as a spec (it is
// parsed as a spec's pipeline-wide `pod`), with every problem at its path.
func ParsePodDefaults(b []byte) (*schema.Pod, error) {
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return nil, fmt.Errorf("pod defaults: %s", yamlErrorMessage(err))
	}
	if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	spec, err := Parse(append(append([]byte(`{"pod":`), j...), '}'))
	if err != nil {
		return nil, fmt.Errorf("pod defaults: %w", err)
	}
	var ps problems
	validatePod("pod", spec.Pod, &ps)
	if len(spec.Pod.Patch) > 0 {
		ps.add("pod.patch", "a patch is not a default (it would override steps' own settings): set the fields instead")
	}
	if err := ps.err(); err != nil {
		return nil, fmt.Errorf("pod defaults: %w", err)
	}
	return spec.Pod, nil
}
