package pipeline

import (
	"errors"
	"fmt"
)

// RenderRay returns a copy of r with templates rendered in entrypoint and in
// every string value inside runtimeEnv, at any depth (keys are names and are
// not rendered). Everything else is copied unchanged; the input is not
// modified, so the spec held by the workflow stays intact across items and
// retries. The first error, in field order (runtimeEnv by sorted key), is
// returned with its path.
func RenderRay(r *RayStep, env Env) (*RayStep, error) {
	if r == nil {
		return nil, errors.New("step has no ray")
	}
	out := *r
	if r.Workers != nil {
		out.Workers = append([]RayWorkerGroup(nil), r.Workers...)
	}
	if r.ShutdownAfterJobFinishes != nil {
		b := *r.ShutdownAfterJobFinishes
		out.ShutdownAfterJobFinishes = &b
	}
	var err error
	if out.Entrypoint, err = RenderString(r.Entrypoint, env); err != nil {
		return nil, fmt.Errorf("entrypoint: %w", err)
	}
	if out.Artifacts, err = renderArtifacts(r.Artifacts, env); err != nil {
		return nil, err
	}
	if r.RuntimeEnv != nil {
		v, err := renderValue("runtimeEnv", r.RuntimeEnv, env)
		if err != nil {
			return nil, err
		}
		out.RuntimeEnv = v.(map[string]any)
	}
	return &out, nil
}

// renderValue deep-copies a JSON-like value, rendering its strings. Maps are
// visited by sorted key so the first error is always the same one.
func renderValue(path string, v any, env Env) (any, error) {
	switch x := v.(type) {
	case string:
		r, err := RenderString(x, env)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return r, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for _, k := range sortedStringKeys(x) {
			r, err := renderValue(key(path, k), x[k], env)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case map[string]string:
		out := make(map[string]string, len(x))
		for _, k := range sortedStringKeys(x) {
			r, err := RenderString(x[k], env)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", key(path, k), err)
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := renderValue(index(path, i), e, env)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case []string:
		out := make([]string, len(x))
		for i, e := range x {
			r, err := RenderString(e, env)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", index(path, i), err)
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil // numbers, booleans, null
}

// RenderSpark returns a copy of s with templates rendered in
// mainApplicationFile, arguments and sparkConf values (image and mainClass
// are never templated). The input is not modified. The first error, in field
// order (sparkConf by sorted key), is returned with its path.
func RenderSpark(s *SparkStep, env Env) (*SparkStep, error) {
	if s == nil {
		return nil, errors.New("step has no spark")
	}
	out := *s
	var err error
	if out.MainApplicationFile, err = RenderString(s.MainApplicationFile, env); err != nil {
		return nil, fmt.Errorf("mainApplicationFile: %w", err)
	}
	if out.Artifacts, err = renderArtifacts(s.Artifacts, env); err != nil {
		return nil, err
	}
	if s.Arguments != nil {
		out.Arguments = make([]string, len(s.Arguments))
		for i, a := range s.Arguments {
			if out.Arguments[i], err = RenderString(a, env); err != nil {
				return nil, fmt.Errorf("%s: %w", index("arguments", i), err)
			}
		}
	}
	if s.SparkConf != nil {
		out.SparkConf = make(map[string]string, len(s.SparkConf))
		for _, k := range sortedStringKeys(s.SparkConf) {
			if out.SparkConf[k], err = RenderString(s.SparkConf[k], env); err != nil {
				return nil, fmt.Errorf("%s: %w", key("sparkConf", k), err)
			}
		}
	}
	return &out, nil
}

// EffectivePlacement returns the placement that applies to the step: its
// own, else the pipeline's (p may be nil), else nil. The result points into
// the spec; do not modify it. A ray step on a shared cluster runs where that
// cluster runs (SharedRayCluster.Placement), whatever this returns.
func (s *Step) EffectivePlacement(p *Spec) *Placement {
	if s.Placement != nil {
		return s.Placement
	}
	if p != nil {
		return p.Placement
	}
	return nil
}

// GPURequest returns the largest GPU request of a single pod of the step and
// that pod's GPU type ("" for any), for choosing a cluster by free capacity:
// a container's resources; for a ray step with its own cluster, the largest
// of the head and worker groups; for a spark step, the larger of driver and
// executor. On a tie the first in that order wins. A ray step on a shared
// cluster requests nothing itself (see RayClusterTemplate.GPURequest), nor
// does a step whose block does not match its kind.
func (s *Step) GPURequest() (count int, gpuType string) {
	kind := s.Kind
	if kind == "" {
		kind = KindContainer
	}
	switch {
	case kind == KindContainer && s.Container != nil && s.Container.Resources != nil:
		count, gpuType = s.Container.Resources.GPU, s.Container.Resources.GPUType
	case kind == KindRay && s.Ray != nil && s.Ray.Cluster == "":
		return s.Ray.RayClusterTemplate.GPURequest()
	case kind == KindSpark && s.Spark != nil:
		count, gpuType = s.Spark.Driver.GPU, s.Spark.Driver.GPUType
		if s.Spark.Executor.GPU > count {
			count, gpuType = s.Spark.Executor.GPU, s.Spark.Executor.GPUType
		}
	}
	if count <= 0 {
		return 0, ""
	}
	return count, gpuType
}

// GPURequest returns the largest GPU request of a single pod of the cluster
// (head or any worker group, whatever its replicas) and its GPU type; on a
// tie the head, then the first group, wins.
func (t *RayClusterTemplate) GPURequest() (count int, gpuType string) {
	count, gpuType = t.Head.GPU, t.Head.GPUType
	for _, g := range t.Workers {
		if g.GPU > count {
			count, gpuType = g.GPU, g.GPUType
		}
	}
	if count <= 0 {
		return 0, ""
	}
	return count, gpuType
}
