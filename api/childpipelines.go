package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/schema"
)

// checkPipelineSteps checks what p's pipeline steps (kind pipeline) refer
// to, in the catalogue of the project p is being stored in (never another
// project's: the step names a pipeline, the project is the run's): that
// the pipeline and version exist, that the params fit the child's
// declared ones, that the artifacts p reads from the step are ones the
// child exports, and that no chain of pipelines runs self again, which
// would nest child runs until spec.MaxPipelineDepth and fail. "The newest
// version" is checked as it is now; the run decides it again when the step
// starts, and enforces the depth limit whatever was stored since.
func (s *server) checkPipelineSteps(ctx context.Context, project, self string, p *pipeline.Spec) ([]schema.Problem, error) {
	var out []schema.Problem
	w := &refWalker{s: s, project: project, self: self, specs: map[versionKey]*pipeline.Spec{}}
	for _, ref := range pipeline.ChildRefs(p) {
		child := p // the newest version of self is the one being stored
		if ref.Name != self || ref.Version != 0 {
			var err error
			child, err = w.load(ctx, ref.Name, ref.Version)
			if errors.Is(err, catalog.ErrNotFound) {
				if ref.Version == 0 {
					out = append(out, schema.Problem{Path: ref.Path + ".pipeline.name", Message: fmt.Sprintf("pipeline %q not found in project %q: store it first", ref.Name, project)})
				} else {
					out = append(out, schema.Problem{Path: ref.Path + ".pipeline.version", Message: fmt.Sprintf("pipeline %q has no version %d in project %q", ref.Name, ref.Version, project)})
				}
				continue
			}
			if err != nil {
				return nil, err
			}
		}
		out = append(out, pipeline.CheckChildStep(ref, &p.Steps[ref.Step], child)...)
		out = append(out, pipeline.CheckChildArtifacts(p, ref, child)...)
		chain, err := w.cycle(ctx, child, []string{self, ref.Name}, ref.Name == self && ref.Version == 0)
		if err != nil {
			return nil, err
		}
		if chain != nil {
			out = append(out, schema.Problem{Path: ref.Path + ".pipeline.name", Message: fmt.Sprintf(
				"pipelines run each other in a cycle (%s): every run would nest child runs until the limit of %d levels and fail",
				strings.Join(chain, " → "), pipeline.MaxPipelineDepth)})
		}
	}
	return out, nil
}

// refWalker follows pipeline steps through stored versions.
type refWalker struct {
	s       *server
	project string
	self    string
	specs   map[versionKey]*pipeline.Spec // loaded versions (nil: not found)
}

func (w *refWalker) load(ctx context.Context, name string, version int) (*pipeline.Spec, error) {
	k := versionKey{w.project, name, version}
	if p, ok := w.specs[k]; ok {
		if p == nil {
			return nil, catalog.ErrNotFound
		}
		return p, nil
	}
	v, _, err := w.s.pipelineVersion(ctx, w.project, name, version, true)
	if errors.Is(err, catalog.ErrNotFound) {
		w.specs[k] = nil
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	var p pipeline.Spec
	if err := json.Unmarshal(v.Spec, &p); err != nil {
		return nil, fmt.Errorf("stored pipeline %s/%s version %d: %w", w.project, name, v.Version, err)
	}
	w.specs[k] = &p
	return &p, nil
}

// cycle returns the chain from self back to self through p (reached by
// chain), or nil. found reports that chain already ends at self. It looks
// at most spec.MaxPipelineDepth levels deep; references it cannot load
// are left to the run (they were checked when their pipeline was stored).
func (w *refWalker) cycle(ctx context.Context, p *pipeline.Spec, chain []string, found bool) ([]string, error) {
	if found {
		return chain, nil
	}
	if len(chain) > pipeline.MaxPipelineDepth {
		return nil, nil
	}
	for _, ref := range pipeline.ChildRefs(p) {
		next := append(append([]string(nil), chain...), ref.Name)
		if ref.Name == w.self && ref.Version == 0 {
			return next, nil
		}
		child, err := w.load(ctx, ref.Name, ref.Version)
		if errors.Is(err, catalog.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if c, err := w.cycle(ctx, child, next, false); c != nil || err != nil {
			return c, err
		}
	}
	return nil, nil
}
