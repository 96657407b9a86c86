package workflows

import (
	"fmt"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Artifacts move between steps as references: a step's status lists the
// artifacts it wrote (digest, size, producer), and a step that reads one
// gets that reference in its request; the worker moves the bytes. Nothing
// here adds a workflow command, so runs without artifacts replay as
// before.

// artifactInputs resolves a step's input artifacts against the run's
// steps that ended, each "<step>.<artifact>" to the producer's reference
// under the input's name. msg says why one cannot be resolved (the
// producer was skipped, or did not write it): the step fails with it.
func (r *Run) artifactInputs(a *pipeline.Artifacts) ([]runstate.Artifact, string) {
	if a == nil || len(a.Inputs) == 0 {
		return nil, ""
	}
	out := make([]runstate.Artifact, 0, len(a.Inputs))
	for _, in := range a.Inputs {
		step, name, ok := pipeline.SplitArtifactRef(in.From)
		if !ok {
			return nil, fmt.Sprintf("input artifact %q: %q is not <step>.<artifact>", in.Name, in.From)
		}
		src := r.stepByName(step)
		if src == nil {
			return nil, fmt.Sprintf("input artifact %q: the run has no step %q", in.Name, step)
		}
		found := false
		for _, art := range src.Artifacts {
			if art.Name == name {
				art.From, art.Name = in.From, in.Name
				out = append(out, art)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Sprintf("input artifact %q: step %q (%s) has no output artifact %q", in.Name, step, src.State, name)
		}
	}
	return out, ""
}
