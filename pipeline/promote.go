package pipeline

import (
	"strconv"
	"strings"

	"github.com/atelier-ml/atelier/schema"
)

// PromoteStep points an alias of the project's registered model at a
// version (kind promote): the step that closes train → evaluate → promote,
// after which the endpoints following the alias (model.follow) roll the
// version out. It names the version by exactly one of:
//   - From, "<step>.<artifact>": that step's output artifact in this run,
//     registered as the model's next version if it is not one yet (the
//     same artifact registers once, with or without `register:`);
//   - Version, a version number.
//
// Both may be templates, rendered when the step starts ("{{
// steps.evaluate.outputs.best }}.model"), which is how an evaluation
// picks the winner. An approval step before it gates the move. The move
// is recorded in the alias history as made by "run <id>". Outputs: model,
// alias, version.
type PromoteStep struct {
	Model   string `json:"model"`
	Alias   string `json:"alias"`
	From    string `json:"from,omitempty"`
	Version string `json:"version,omitempty"`
}

// promoteTemplates calls fn with each templatable field of p and its path
// under the step's promote block.
func promoteTemplates(p *PromoteStep, fn func(field, value string)) {
	fn("from", p.From)
	fn("version", p.Version)
}

// RenderPromote renders a promote step's templates.
func RenderPromote(p *PromoteStep, env Env) (*PromoteStep, error) {
	r := *p
	var err error
	if r.From, err = RenderString(p.From, env); err != nil {
		return nil, err
	}
	r.Version, err = RenderString(p.Version, env)
	return &r, err
}

// PromoteVersion reads a rendered Version: a positive number, or false.
func PromoteVersion(v string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	return n, err == nil && n > 0
}

// validatePromote checks a promote step: the model and alias names, one
// version source, and a static From naming an output another step of the
// pipeline declares (a template is checked once rendered).
func validatePromote(path string, s *Step, sc *refScope, steps []Step, ps *problems) {
	if s.ForEach != nil {
		ps.add(field(path, "forEach"), "a promote step moves one alias once; forEach does not apply (promote the winner of a sweep with from: \"{{ ... }}\")")
	}
	p := s.Promote
	pp := field(path, "promote")
	if p == nil {
		ps.add(pp, "required for a promote step: model, alias, and from or version")
		return
	}
	for _, f := range []struct{ name, v string }{{"model", p.Model}, {"alias", p.Alias}} {
		switch {
		case f.v == "":
			ps.add(field(pp, f.name), "required")
		case hasTemplate(f.v):
			ps.add(field(pp, f.name), "templates are not allowed here: the %s is part of what the pipeline does, not of a run", f.name)
		case !schema.ValidModelName(f.v):
			ps.add(field(pp, f.name), "%q: lowercase letters, digits, '.', '_' and '-', at most 63", f.v)
		}
	}
	switch {
	case (p.From == "") == (p.Version == ""):
		ps.add(pp, "name the version with exactly one of from (<step>.<artifact>, an output of this run) or version (a number)")
	case p.Version != "" && !hasTemplate(p.Version):
		if _, ok := PromoteVersion(p.Version); !ok {
			ps.add(field(pp, "version"), "%q is not a version number", p.Version)
		}
	case p.From != "" && !hasTemplate(p.From):
		validatePromoteFrom(field(pp, "from"), p.From, s.Name, sc, steps, ps)
	}
}

func validatePromoteFrom(path, from, self string, sc *refScope, steps []Step, ps *problems) {
	step, name, ok := SplitArtifactRef(from)
	if !ok {
		ps.add(path, "%q is not <step>.<artifact>", from)
		return
	}
	i, known := sc.steps[step]
	switch {
	case !known && sc.outer[step]:
		return // an exit handler reads the pipeline's steps: checked there
	case !known || step == self:
		ps.add(path, "unknown step %q", step)
		return
	case i >= len(steps):
		return
	}
	producer := steps[i]
	if producer.ForEach != nil {
		ps.add(path, "step %q is a forEach: its items each write %q; promote one item's by rendering from with a template that names a step, or register the items' outputs", step, name)
		return
	}
	if producer.Kind == KindPipeline {
		return // an artifact its child exports: see CheckChildArtifacts
	}
	if producer.Container != nil && producer.Container.Artifacts != nil {
		for _, o := range producer.Container.Artifacts.Outputs {
			if o.Name == name {
				return
			}
		}
	}
	ps.add(path, "step %q declares no output artifact %q", step, name)
}
