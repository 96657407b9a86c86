package pipeline

import (
	"fmt"
	"sort"
	"strings"

	"github.com/atelier-ml/atelier/schema"
)

// ArtifactExport is an output artifact of one of the pipeline's steps that
// a run of the pipeline hands to its parent when it runs as a child (a
// pipeline step of another pipeline): the parent's step carries it under
// Name, so the parent's steps read it with from: "<pipelineStep>.<Name>"
// exactly as they read a container step's output. It is the same artifact
// (ID, digest, producer: the child run's step), not a copy, so lineage
// shows the child's step as its producer and the parent's step as a
// consumer.
type ArtifactExport struct {
	// Name is the name the parent reads it under (an artifact name).
	Name string `json:"name"`
	// From is the artifact as "<step>.<artifact>": an output a container
	// step of this pipeline declares, or one a pipeline step of this
	// pipeline carries (an export of its own child, passed on).
	From string `json:"from"`
}

// MaxArtifactExports bounds Spec.Artifacts.
const MaxArtifactExports = 100

// validateExports checks the pipeline's exported artifacts: names valid
// and unique, each from an output a step of the pipeline (not an exit
// handler) declares. A forEach step's export is a directory holding each
// item's artifact under its index (the run assembles it when it ends, as
// a reading step's fan-in); not a forEach of pipeline steps. A pipeline step's are accepted: its
// child is known when the spec is stored (CheckChildArtifacts).
func validateExports(p *Spec, ps *problems) {
	if len(p.Artifacts) > MaxArtifactExports {
		ps.add("artifacts", "%d exported artifacts; the limit is %d", len(p.Artifacts), MaxArtifactExports)
	}
	seen := map[string]bool{}
	for j, e := range p.Artifacts {
		ep := index("artifacts", j)
		checkArtifactName(field(ep, "name"), e.Name, seen, ps)
		fp := field(ep, "from")
		if e.From == "" {
			ps.add(fp, "required: the exported artifact as <step>.<artifact>")
			continue
		}
		if hasTemplate(e.From) {
			ps.add(fp, "templates are not supported in an exported artifact's from: what a pipeline exports is checked when it is stored")
			continue
		}
		step, name, ok := SplitArtifactRef(e.From)
		if !ok {
			ps.add(fp, "%q is not a reference to a step's artifact (<step>.<artifact>)", e.From)
			continue
		}
		k := -1
		for i := range p.Steps {
			if p.Steps[i].Name == step {
				k = i
				break
			}
		}
		if k < 0 {
			msg := fmt.Sprintf("no step named %q in this pipeline's steps", step)
			for _, x := range p.OnExit {
				if x.Name == step {
					msg = fmt.Sprintf("%q is an exit handler (onExit); a pipeline exports artifacts of its steps", step)
				}
			}
			ps.add(fp, "%s", msg)
			continue
		}
		s := &p.Steps[k]
		switch {
		case s.ForEach != nil && s.Kind == KindPipeline:
			ps.add(fp, "step %q is a forEach of pipeline steps: exporting its children's artifacts is not supported (export a forEach of container steps, whose items' artifacts make one directory)", step)
		case s.Kind == KindPipeline:
			// Its child's exports: checked against the stored child
			// (CheckChildArtifacts) and when the run ends.
		case !declaresOutput(s.DeclaredArtifacts(), name):
			ps.add(fp, "step %q declares no output artifact named %q", step, name)
		}
	}
}

// ExportNames are the names of the artifacts p exports, in declaration
// order.
func (p *Spec) ExportNames() []string {
	out := make([]string, 0, len(p.Artifacts))
	for _, e := range p.Artifacts {
		out = append(out, e.Name)
	}
	return out
}

// Exports reports whether p exports an artifact named name.
func (p *Spec) Exports(name string) bool {
	for _, e := range p.Artifacts {
		if e.Name == name {
			return true
		}
	}
	return false
}

// CheckChildArtifacts checks what p reads of the artifacts of its pipeline
// step ref (container inputs, promote steps and p's own exports that name
// "<step>.<artifact>") against child, the pipeline that step runs (as
// stored): each artifact must be one child exports. Problems carry the
// reading field's path. Validate accepts any name, as the child is
// stored apart; the run checks again when the child run ends, since a
// step without a pinned version runs the newest one then.
func CheckChildArtifacts(p *Spec, ref ChildRef, child *Spec) []schema.Problem {
	var ps problems
	stepName := p.Steps[ref.Step].Name
	check := func(path, from string) {
		step, name, ok := SplitArtifactRef(from)
		if !ok || step != stepName || child.Exports(name) {
			return
		}
		ps.add(path, "%s", MissingExport(stepName, ChildLabel(ref.Name, ref.Version), name, child.ExportNames()))
	}
	for i := range p.Steps {
		s := &p.Steps[i]
		sp := index("steps", i)
		if c := s.Container; c != nil && c.Artifacts != nil {
			for j, in := range c.Artifacts.Inputs {
				if in.From != "" && !in.IsRef() {
					check(field(index(field(sp, "container.artifacts.inputs"), j), "from"), in.From)
				}
			}
		}
		if pr := s.Promote; pr != nil && !hasTemplate(pr.From) {
			check(field(sp, "promote.from"), pr.From)
		}
	}
	for i := range p.OnExit {
		if pr := p.OnExit[i].Promote; pr != nil && !hasTemplate(pr.From) {
			check(field(index("onExit", i), "promote.from"), pr.From)
		}
	}
	for j, e := range p.Artifacts {
		check(field(index("artifacts", j), "from"), e.From)
	}
	sort.SliceStable(ps.list, func(i, j int) bool { return ps.list[i].Path < ps.list[j].Path })
	return ps.list
}

// ChildLabel names the pipeline a pipeline step runs: `pipeline "x"`, with
// its version when one is known (0: the newest).
func ChildLabel(name string, version int) string {
	if version > 0 {
		return fmt.Sprintf("pipeline %q version %d", name, version)
	}
	return fmt.Sprintf("pipeline %q", name)
}

// MissingExport says that the pipeline step step, which runs child (a
// ChildLabel, perhaps with its run), exports no artifact name, and what it
// exports instead: the one message of the gateway's check and of the run.
func MissingExport(step, child, name string, exports []string) string {
	msg := fmt.Sprintf("step %q runs %s, which exports no artifact %q", step, child, name)
	switch {
	case len(exports) == 0:
		return msg + " (it exports none: list the artifact under that pipeline's artifacts, as {name, from: <step>.<artifact>})"
	default:
		if sg := suggest(name, exports); sg != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", sg)
		}
		return msg + "; it exports " + strings.Join(quoteAll(exports), ", ")
	}
}

func quoteAll(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
