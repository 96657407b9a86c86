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
//     same artifact registers once, with or without `register:`); or
//     "<step>[<index>].<artifact>": the artifact of one item (0-based) of
//     the forEach step <step>;
//   - Version, a version number.
//
// Both may be templates, rendered when the step starts ("{{
// steps.evaluate.outputs.best }}.model", "train[{{
// steps.pick.outputs.best }}].model"), which is how an evaluation picks
// the winner. An approval step before it gates the move. The move
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
	case p.From != "":
		validatePromoteFrom(field(pp, "from"), p.From, s.Name, sc, steps, ps)
	}
}

// SplitPromoteFrom splits a promote step's From: "<step>.<artifact>", or
// "<step>[<index>].<artifact>" (item set) naming an item of a forEach
// step; the index is a template until rendered.
func SplitPromoteFrom(from string) (step, index, artifact string, item, ok bool) {
	step, artifact, ok = SplitArtifactRef(from)
	if !ok {
		return "", "", "", false, false
	}
	if strings.HasSuffix(step, "]") {
		if i := strings.IndexByte(step, '['); i >= 0 {
			return step[:i], step[i+1 : len(step)-1], artifact, true, i > 0
		}
	}
	return step, "", artifact, false, true
}

// PromoteItemIndex reads a rendered item index: a number >= 0, or false.
func PromoteItemIndex(v string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	return n, err == nil && n >= 0
}

// promoteFromStep is the step a From reads when that is known before the
// run (its step part is not a template; its item index may be).
func promoteFromStep(from string) (string, bool) {
	step, _, artifact, _, ok := SplitPromoteFrom(from)
	if !ok || hasTemplate(step) || hasTemplate(artifact) {
		return "", false
	}
	return step, true
}

// validatePromoteFrom checks the parts of From known before the run: a
// step part and artifact without templates name an output artifact
// another step declares, a forEach's only through one of its items
// (whose index, a template or a number, is checked once rendered).
func validatePromoteFrom(path, from, self string, sc *refScope, steps []Step, ps *problems) {
	step, idx, name, item, ok := SplitPromoteFrom(from)
	if !ok {
		if !hasTemplate(from) {
			ps.add(path, "%q is not <step>.<artifact> or <forEachStep>[<index>].<artifact>", from)
		}
		return
	}
	if hasTemplate(step) || hasTemplate(name) {
		return // checked once rendered
	}
	if item && !hasTemplate(idx) {
		if _, ok := PromoteItemIndex(idx); !ok {
			ps.add(path, "item index %q is not a number (0 for the first item) or a template", idx)
			return
		}
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
	switch {
	case producer.ForEach != nil && !item:
		ps.add(path, "step %q is a forEach: its items each write %q; promote one item's as %s[<index>].%s (the index may be a template, e.g. {{ steps.pick.outputs.best }}), or register the items' outputs", step, name, step, name)
		return
	case producer.ForEach == nil && item:
		ps.add(path, "step %q is not a forEach: name its artifact as %s.%s", step, step, name)
		return
	}
	if producer.Kind == KindPipeline {
		return // an artifact its child exports: see CheckChildArtifacts
	}
	if declaresOutput(producer.DeclaredArtifacts(), name) {
		return
	}
	ps.add(path, "step %q declares no output artifact %q", step, name)
}
