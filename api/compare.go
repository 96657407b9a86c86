package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Bounds of a comparison: a page of a table, not a report.
const (
	minCompared = 2
	maxCompared = 20
)

// CompareRuns puts 2 to 20 runs side by side: parameters, top-level step
// outputs and step metrics (see compareRuns).
func (s *server) CompareRuns(ctx context.Context, req gen.CompareRunsRequestObject) (gen.CompareRunsResponseObject, error) {
	ids := req.Params.Runs
	var fields []gen.FieldError
	if len(ids) < minCompared || len(ids) > maxCompared {
		fields = append(fields, gen.FieldError{Path: "query.runs", Message: fmt.Sprintf("compare %d to %d runs, got %d", minCompared, maxCompared, len(ids))})
	}
	seen := map[string]int{}
	for i, id := range ids {
		if j, dup := seen[id]; dup {
			fields = append(fields, gen.FieldError{Path: fmt.Sprintf("query.runs[%d]", i), Message: fmt.Sprintf("run %s is already runs[%d]", id, j)})
		}
		seen[id] = i
	}
	if len(fields) > 0 {
		return nil, newProblem(ptInvalid, "%s", summarize(fields)).withErrors(fields)
	}
	runs := make([]catalog.Run, len(ids))
	statuses := make([]*runstate.Status, len(ids))
	for i, id := range ids {
		run, err := s.getRun(ctx, req.Project, id)
		if err != nil {
			return nil, err
		}
		st := s.liveStatus(ctx, run)
		runs[i], statuses[i] = run, &st
	}
	return gen.CompareRuns200JSONResponse(compareRuns(runs, statuses)), nil
}

// compareRuns builds the comparison of runs (with their statuses, nil for
// a run without one): a row per parameter, per step output and per step
// metric, sorted by step then name, each with a value per run.
func compareRuns(runs []catalog.Run, statuses []*runstate.Status) gen.RunComparison {
	out := gen.RunComparison{
		Runs: make([]gen.ComparedRun, len(runs)), Params: []gen.ComparedValue{}, Outputs: []gen.ComparedValue{},
		Metrics: []gen.ComparedMetric{}, Series: []gen.ComparedSeries{},
	}
	for i, r := range runs {
		cr := gen.ComparedRun{Id: r.ID, Workflow: r.Workflow, State: gen.RunState(r.State), CreatedAt: r.CreatedAt, CreatedBy: opt(r.CreatedBy)}
		if r.Pipeline != "" {
			cr.Pipeline, cr.Version = ptr(r.Pipeline), ptr(r.Version)
		}
		if st := statuses[i]; st != nil {
			cr.State = gen.RunState(st.State)
		}
		out.Runs[i] = cr
	}
	n := len(runs)

	params := map[string][]any{}
	for i, st := range statuses {
		if st == nil {
			continue
		}
		for k, v := range st.Params {
			row(params, k, n)[i] = v
		}
	}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		out.Params = append(out.Params, gen.ComparedValue{Name: k, Values: params[k], Differs: notAllEqual(params[k])})
	}

	type key struct{ step, name string }
	less := func(a, b key) int {
		if c := cmp.Compare(a.step, b.step); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	}
	outputs := map[key][]any{}
	scalars := map[key][]*float64{}
	series := map[key][][]float64{}
	for i, st := range statuses {
		if st == nil {
			continue
		}
		for _, step := range st.Steps {
			if o, ok := step.Outputs.(map[string]any); ok {
				for k, v := range o {
					row(outputs, key{step.Name, k}, n)[i] = v
				}
			}
			if step.Metrics == nil {
				continue
			}
			for k, v := range step.Metrics.Scalars {
				row(scalars, key{step.Name, k}, n)[i] = &v
			}
			for k, v := range step.Metrics.Series {
				row(series, key{step.Name, k}, n)[i] = v
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(outputs), less) {
		out.Outputs = append(out.Outputs, gen.ComparedValue{Step: ptr(k.step), Name: k.name, Values: outputs[k], Differs: notAllEqual(outputs[k])})
	}
	for _, k := range slices.SortedFunc(maps.Keys(scalars), less) {
		goal := goalOf(runs, k.step, k.name)
		m := gen.ComparedMetric{Step: k.step, Name: k.name, Values: scalars[k], Goal: gen.ComparedMetricGoal(goal)}
		vals := make([]any, n)
		have, best, worst := 0, -1, -1
		better := func(a, b float64) bool { return a > b }
		if goal == pipeline.Minimize {
			better = func(a, b float64) bool { return a < b }
		}
		for i, v := range scalars[k] {
			if v == nil {
				continue
			}
			vals[i] = *v
			have++
			if best < 0 || better(*v, *scalars[k][best]) {
				best = i
			}
			if worst < 0 || better(*scalars[k][worst], *v) {
				worst = i
			}
		}
		m.Differs = notAllEqual(vals)
		if have >= 2 && m.Differs {
			m.Best, m.Worst = ptr(best), ptr(worst)
		}
		out.Metrics = append(out.Metrics, m)
	}
	for _, k := range slices.SortedFunc(maps.Keys(series), less) {
		out.Series = append(out.Series, gen.ComparedSeries{Step: k.step, Name: k.name, Values: series[k]})
	}
	return out
}

// goalOf is the goal of a step's metric: as the first of runs whose
// pipeline version declares it (the step's `metrics`), else maximize.
func goalOf(runs []catalog.Run, step, name string) pipeline.MetricGoal {
	for _, r := range runs {
		var in struct {
			Spec struct {
				Steps []struct {
					Name    string                         `json:"name"`
					Metrics map[string]pipeline.MetricGoal `json:"metrics"`
				} `json:"steps"`
			} `json:"spec"`
		}
		if len(r.Input) == 0 || json.Unmarshal(r.Input, &in) != nil {
			continue
		}
		for _, s := range in.Spec.Steps {
			if g, ok := s.Metrics[name]; ok && s.Name == step {
				return g
			}
		}
	}
	return pipeline.Maximize
}

// row returns m[k], made with one (nil) slot per run when new.
func row[K comparable, V any](m map[K][]V, k K, n int) []V {
	r, ok := m[k]
	if !ok {
		r = make([]V, n)
		m[k] = r
	}
	return r
}

// notAllEqual reports whether the JSON values are not all equal (a missing
// value, nil, differs from any present one).
func notAllEqual(vals []any) bool {
	var first []byte
	for i, v := range vals {
		b, _ := json.Marshal(v) // encoding/json sorts object keys: equal values encode equally
		if i == 0 {
			first = b
			continue
		}
		if !bytes.Equal(b, first) {
			return true
		}
	}
	return false
}
