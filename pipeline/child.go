package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/atelier-ml/atelier/schema"
)

// PipelineNamePattern is what a stored pipeline's name must match (the
// REST API's PipelineName).
const NamePattern = `^[a-z][a-z0-9-]{1,62}$`

var pipelineNameRE = regexp.MustCompile(NamePattern)

// MaxPipelineOutputs bounds a pipeline's outputs map.
const MaxOutputs = 100

// validatePipelineStep checks a pipeline step's block and the step fields
// that do not apply to it (its templates are checked with the others').
// Whether the named pipeline exists, and the params against its declared
// ones, need the catalogue: CheckPipelineStep.
func validatePipelineStep(path string, s *Step, ps *problems) {
	c := s.Pipeline
	if c == nil {
		ps.add(field(path, "pipeline"), "required for a pipeline step (at least pipeline.name)")
		return
	}
	cp := field(path, "pipeline")
	switch {
	case c.Name == "":
		ps.add(field(cp, "name"), "required: a stored pipeline of the run's project")
	case hasTemplate(c.Name):
		ps.add(field(cp, "name"), "templates are not supported in the pipeline's name: it is checked when this spec is stored")
	case !pipelineNameRE.MatchString(c.Name):
		ps.add(field(cp, "name"), "invalid pipeline name %q: use lowercase letters, digits and '-', starting with a letter, 2 to 63 characters", c.Name)
	}
	if c.Version < 0 {
		ps.add(field(cp, "version"), "must be a version number, or absent for the newest version when the step starts")
	}
	for _, k := range sortedStringKeys(c.Params) {
		if !identRE.MatchString(k) {
			ps.add(key(field(cp, "params"), k), "invalid param name %q: use letters, digits and '_', not starting with a digit", k)
		}
	}
}

// pipelineTemplates calls fn with the path (relative to the pipeline
// block) and value of every string of a pipeline step's params, by sorted
// key ("params.dataset", "params.cfg.lr").
func pipelineTemplates(c *ChildStep, fn func(path, v string)) {
	if c.Params != nil {
		walkStrings("params", c.Params, fn)
	}
}

// validateOutputs checks the pipeline's outputs: names, and templates over
// params, steps and run (item belongs to forEach steps).
func validateOutputs(p *Spec, sc *refScope, ps *problems) {
	if len(p.Outputs) > MaxOutputs {
		ps.add("outputs", "%d outputs; the limit is %d", len(p.Outputs), MaxOutputs)
	}
	osc := *sc
	osc.itemOK = false
	osc.itemWhy = "item is only available in steps with forEach, not in the pipeline's outputs"
	for _, k := range sortedStringKeys(p.Outputs) {
		op := key("outputs", k)
		if !identRE.MatchString(k) {
			ps.add(op, "invalid output name %q: use letters, digits and '_', not starting with a digit", k)
		}
		_, msgs := checkTemplate(p.Outputs[k], &osc)
		for _, m := range msgs {
			ps.add(op, "%s", m)
		}
	}
}

// RenderPipelineStep returns a copy of c with the templates of its params
// rendered: a string that is exactly one "{{ expr }}" becomes the value of
// expr as JSON data (numbers as float64, as params are), any other string
// is rendered as RenderString does. The input is not modified.
func RenderChildStep(c *ChildStep, env Env) (*ChildStep, error) {
	if c == nil {
		return nil, errors.New("step has no pipeline")
	}
	out := &ChildStep{Name: c.Name, Version: c.Version}
	if c.Params == nil {
		return out, nil
	}
	v, err := renderTyped("params", c.Params, env)
	if err != nil {
		return nil, err
	}
	out.Params = v.(map[string]any)
	return out, nil
}

// EvalOutputs evaluates a pipeline's outputs once its steps are done (nil
// when it declares none). A value that is exactly one "{{ expr }}" keeps
// its type; the others are rendered strings. The first error, by sorted
// name, is returned with its path.
func EvalOutputs(p *Spec, env Env) (map[string]any, error) {
	if len(p.Outputs) == 0 {
		return nil, nil
	}
	out := make(map[string]any, len(p.Outputs))
	for _, k := range sortedStringKeys(p.Outputs) {
		v, err := renderTyped(key("outputs", k), p.Outputs[k], env)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("outputs: %w", err)
	}
	if len(b) > MaxOutputsBytes {
		return nil, fmt.Errorf("outputs are %d KiB; the limit is %d KiB", len(b)>>10, MaxOutputsBytes>>10)
	}
	return out, nil
}

// renderTyped renders the strings in v (maps by sorted key); a string that
// is exactly one template keeps the expression's value, as JSON data.
func renderTyped(path string, v any, env Env) (any, error) {
	switch x := v.(type) {
	case string:
		if src, ok := wholeTemplate(x); ok {
			val, err := runExpr(src, modeValue, env)
			if err != nil {
				return nil, fmt.Errorf("%s: {{ %s }}: %w", path, src, err)
			}
			data, err := jsonData(val)
			if err != nil {
				return nil, fmt.Errorf("%s: {{ %s }}: %w", path, src, err)
			}
			return data, nil
		}
		r, err := RenderString(x, env)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return r, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for _, k := range sortedStringKeys(x) {
			r, err := renderTyped(key(path, k), x[k], env)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := renderTyped(index(path, i), e, env)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return normalizeValue(v), nil
}

// wholeTemplate reports whether s is exactly one "{{ expr }}" (surrounding
// spaces aside) and returns expr.
func wholeTemplate(s string) (string, bool) {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "{{") {
		return "", false
	}
	segs, err := splitTemplate(t)
	if err != nil || len(segs) != 1 || !segs[0].isExpr {
		return "", false
	}
	return segs[0].text, true
}

// jsonData converts an expression's value to plain JSON data (maps,
// lists, float64, strings, booleans, nil), the form values take once they
// cross Temporal's payloads, so that replay sees the same values.
func jsonData(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("cannot pass %T as JSON: %v", v, err)
	}
	if len(b) > MaxRenderedValue {
		return nil, fmt.Errorf("the value is %w: it exceeds %d KiB", ErrBudget, MaxRenderedValue>>10)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// PipelineRef is a pipeline step's reference to a stored pipeline.
type ChildRef struct {
	// Step is the index of the step in Pipeline.Steps; Path its path
	// ("steps[2]").
	Step int
	Path string
	Name string
	// Version is 0 for the newest.
	Version int
}

// PipelineRefs lists the stored pipelines p's pipeline steps run, in step
// order (steps whose block is missing or invalid are left out).
func ChildRefs(p *Spec) []ChildRef {
	var out []ChildRef
	for i := range p.Steps {
		s := &p.Steps[i]
		if s.Kind != KindPipeline || s.Pipeline == nil || !pipelineNameRE.MatchString(s.Pipeline.Name) || s.Pipeline.Version < 0 {
			continue
		}
		out = append(out, ChildRef{Step: i, Path: index("steps", i), Name: s.Pipeline.Name, Version: s.Pipeline.Version})
	}
	return out
}

// CheckPipelineStep checks a pipeline step's params against child, the
// pipeline it runs (as stored): unknown names, required params without a
// value and the type of every value known before the run (a literal, or
// a string with templates, which renders as a string). A value that is
// exactly one "{{ expr }}" is checked when the step starts. Problems carry
// the step's path (ref.Path).
func CheckChildStep(ref ChildRef, s *Step, child *Spec) []schema.Problem {
	var ps problems
	pp := field(field(ref.Path, "pipeline"), "params")
	declared := map[string]Param{}
	var names []string
	for _, prm := range child.Params {
		if _, dup := declared[prm.Name]; !dup {
			declared[prm.Name] = prm
			names = append(names, prm.Name)
		}
	}
	given := s.Pipeline.Params
	for _, k := range sortedStringKeys(given) {
		prm, ok := declared[k]
		if !ok {
			msg := fmt.Sprintf("pipeline %q has no param %q", ref.Name, k)
			if sg := suggest(k, names); sg != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", sg)
			}
			ps.add(key(pp, k), "%s", msg)
			continue
		}
		v := given[k]
		if str, isStr := v.(string); isStr && hasTemplate(str) {
			if _, whole := wholeTemplate(str); whole || prm.Type == ParamString {
				continue
			}
			ps.add(key(pp, k), "param %q of pipeline %q is %s, but this value renders as a string; write it as one \"{{ expr }}\" to pass the expression's value", k, ref.Name, article2(prm.Type))
			continue
		}
		if v == nil {
			continue // null: the default applies
		}
		if msg := valueTypeError(prm.Type, v); msg != "" {
			ps.add(key(pp, k), "param %q of pipeline %q %s", k, ref.Name, msg)
		}
	}
	for _, n := range names {
		if prm := declared[n]; prm.Default == nil {
			if v, ok := given[n]; !ok || v == nil {
				ps.add(pp, "pipeline %q requires param %q (it has no default)", ref.Name, n)
			}
		}
	}
	sort.SliceStable(ps.list, func(i, j int) bool { return ps.list[i].Path < ps.list[j].Path })
	return ps.list
}

// article2 names a param type with its article ("an integer").
func article2(t ParamType) string {
	switch t {
	case ParamInteger, ParamObject, ParamArray:
		return "an " + string(t)
	}
	return "a " + string(t)
}
