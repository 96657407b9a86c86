package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/schema"
)

// validateInference checks an inference step's configuration: the endpoint
// name, the cluster, and the endpoint spec through inference.Validate, whose
// problems come back under path + ".spec." all at once. A value that holds
// a template is checked only once rendered (by the step's activity), since
// "{{ steps.train.outputs.model }}" is not yet the model URI it will be.
func validateInference(path string, s *InferenceStep, vc *vctx, ps *problems) {
	ep := field(path, "endpoint")
	switch {
	case strings.TrimSpace(s.Endpoint) == "":
		ps.add(ep, "required: the endpoint's name in the run's project")
	case hasTemplate(s.Endpoint):
	default:
		if err := inference.CheckName(s.Endpoint); err != nil {
			ps.add(ep, "%s", err.Error())
		}
	}

	cp := field(path, "cluster")
	switch {
	case s.Cluster == "" && !vc.localEndpoints:
		ps.add(cp, "required: the registered cluster the endpoint runs on (the local runtime here does not serve inference endpoints)")
	case s.Cluster == "":
	case !kubeClusterRE.MatchString(s.Cluster):
		ps.add(cp, "invalid cluster name %q: use lowercase letters, digits and '-', starting with a letter, at most 63 characters", s.Cluster)
	case !vc.kube:
		ps.add(cp, "no Kubernetes cluster is registered; leave cluster out to serve the endpoint on the local runtime")
	}

	if s.Spec.Pod != nil {
		pp := field(field(path, "spec"), "pod")
		if podHasTemplates(s.Spec.Pod) {
			ps.add(pp, "templates are not supported in pod settings")
		}
		if s.Cluster == "" {
			ps.add(pp, "pod settings apply to endpoints on a Kubernetes cluster (cluster); this endpoint runs on the local runtime")
		}
	}

	templated := map[string]bool{}
	inferenceTemplates(s, func(p, v string) {
		if hasTemplate(v) {
			templated[p] = true
		}
	})
	var ve *schema.ValidationError
	if err := inference.Validate(s.Spec); errors.As(err, &ve) {
		sp := field(path, "spec")
		for _, pr := range ve.Problems {
			if templated[field("spec", pr.Path)] {
				continue
			}
			p := sp
			if pr.Path != "" {
				p = field(sp, pr.Path)
			}
			ps.add(p, "%s", pr.Message)
		}
	}
}

func hasTemplate(s string) bool { return strings.Contains(s, "{{") }

// inferenceTemplates calls fn with the path (relative to the inference
// block) and value of every templatable string of an inference step:
// endpoint, then every string of spec by sorted key ("spec.model.uri",
// "spec.env[0].value"). Durations are parsed with the spec, so they never
// hold a template.
func inferenceTemplates(s *InferenceStep, fn func(path, v string)) {
	fn("endpoint", s.Endpoint)
	if doc, err := specDoc(s.Spec); err == nil {
		walkStrings("spec", doc, fn)
	}
}

// specDoc is the endpoint spec as a JSON value, so that its strings are
// walked and rendered by the code that does it for ray's runtimeEnv
// (walkStrings, renderValue), at the paths the spec is written with. The
// conversion is exact (integers and shortest-form floats survive float64)
// and fails only for a NaN or infinite float, which no parsed spec holds.
func specDoc(s inference.EndpointSpec) (map[string]any, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// RenderInference returns a copy of s with templates rendered in endpoint
// and in every string of spec; cluster is copied as it is. The input is
// not modified. The first error, in field order (spec by sorted key), is
// returned with its path. The rendered spec is not validated here: the
// step's activity does it, with every problem at once.
func RenderInference(s *InferenceStep, env Env) (*InferenceStep, error) {
	if s == nil {
		return nil, errors.New("step has no inference")
	}
	out := InferenceStep{Cluster: s.Cluster}
	var err error
	if out.Endpoint, err = RenderString(s.Endpoint, env); err != nil {
		return nil, fmt.Errorf("endpoint: %w", err)
	}
	doc, err := specDoc(s.Spec)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	rendered, err := renderValue("spec", doc, env)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(rendered)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	if err := json.Unmarshal(b, &out.Spec); err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	return &out, nil
}
