package foreach

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
)

// renderItemsBytes bounds the rendered work one activities.RenderItemsName call
// returns (plus one item, at most spec.MaxRenderedStep): far under
// Temporal's 2 MB payload limit.
const renderItemsBytes = 512 << 10

// Render answers a RenderRequest (activities.RenderStepName), with env holding the
// wide steps' outputs. Exported for the workflow tests' fake render activity.
func Render(req *activities.RenderRequest, env pipeline.Env) (activities.RenderResult, error) {
	if req.PipelineOutputs != nil {
		// The workflow says what failed (the pipeline's outputs).
		out, err := pipeline.EvalOutputs(&pipeline.Spec{Outputs: req.PipelineOutputs}, env)
		return activities.RenderResult{PipelineOutputs: out}, err
	}
	if req.WhenOnly {
		if req.Step.When == "" {
			return activities.RenderResult{}, nil
		}
		ok, err := pipeline.EvalWhen(req.Step.When, env)
		if err != nil {
			return activities.RenderResult{}, fmt.Errorf("evaluating when %q: %w", req.Step.When, err)
		}
		return activities.RenderResult{Skip: !ok}, nil
	}
	res, err := renderStep(&req.Step, env, req.Items)
	if err != nil && req.ItemsByRef {
		var big *listTooLarge
		if errors.As(err, &big) && big.n > pipeline.WideThreshold {
			return activities.RenderResult{Count: big.n}, nil
		}
	}
	return res, err
}

// listTooLarge is the error of a forEach list computed from wide outputs
// that is over MaxRenderedItems of JSON.
type listTooLarge struct{ n, bytes int }

func (e *listTooLarge) Error() string {
	return fmt.Sprintf("forEach items computed from a wide step's outputs are %d KiB; the limit is %d KiB", e.bytes>>10, activities.MaxRenderedItems>>10)
}

// RenderStep renders what an activity was asked to (activities.RenderStepName), with
// env holding the wide steps' outputs.
func renderStep(s *pipeline.Step, env pipeline.Env, items bool) (activities.RenderResult, error) {
	if s.When != "" {
		ok, err := pipeline.EvalWhen(s.When, env)
		if err != nil {
			return activities.RenderResult{}, fmt.Errorf("evaluating when %q: %w", s.When, err)
		}
		if !ok {
			return activities.RenderResult{Skip: true}, nil
		}
	}
	if items {
		list, err := pipeline.EvalItems(s.ForEach, env)
		if err != nil {
			return activities.RenderResult{}, fmt.Errorf("evaluating forEach items: %w", err)
		}
		b, err := json.Marshal(list)
		if err != nil {
			return activities.RenderResult{}, fmt.Errorf("forEach items are not JSON: %w", err)
		}
		if len(b) > activities.MaxRenderedItems {
			return activities.RenderResult{}, &listTooLarge{n: len(list), bytes: len(b)}
		}
		return activities.RenderResult{Items: b}, nil
	}
	if s.Kind == pipeline.KindApproval {
		a, err := pipeline.RenderApproval(s.Approval, env)
		if err == nil && a != nil {
			err = pipeline.CheckRenderedSize(a)
		}
		if err != nil {
			return activities.RenderResult{}, fmt.Errorf("rendering templates: %w", err)
		}
		return activities.RenderResult{Approval: a}, nil
	}
	if s.Kind == pipeline.KindPromote {
		p, err := pipeline.RenderPromote(s.Promote, env)
		if err != nil {
			return activities.RenderResult{}, fmt.Errorf("rendering templates: %w", err)
		}
		return activities.RenderResult{Promote: p}, nil
	}
	w, err := pipeline.RenderStep(s, env)
	if err != nil {
		return activities.RenderResult{}, fmt.Errorf("rendering templates: %w", err)
	}
	return activities.RenderResult{Container: w.Container, Ray: w.Ray, Spark: w.Spark, Inference: w.Inference, Pipeline: w.Pipeline}, nil
}

// RenderItems answers a RenderItemsRequest (activities.RenderItemsName) with env
// holding params, outputs and the wide steps' outputs (the item aside).
// It renders from req.From on and returns at req.End, once about
// renderItemsBytes are rendered, or when stop says so, with at least one
// item. An item whose templates fail carries the error; an error is
// returned only when the list itself cannot be had. Exported for the workflow tests'
// fake render activity.
func RenderItems(req *activities.RenderItemsRequest, env pipeline.Env, stop func() bool) (activities.RenderItemsResult, error) {
	if req.From < 0 || req.From >= req.End || req.End > req.Total {
		return activities.RenderItemsResult{}, fmt.Errorf("items %d–%d of %d: not a range of the list", req.From, req.End-1, req.Total)
	}
	var items []any
	if req.Step.ForEach == nil {
		if len(req.Items) != req.End-req.From {
			return activities.RenderItemsResult{}, fmt.Errorf("items %d–%d: got %d items", req.From, req.End-1, len(req.Items))
		}
		items = req.Items
	} else {
		all, err := pipeline.EvalItems(req.Step.ForEach, env)
		if err != nil {
			return activities.RenderItemsResult{}, fmt.Errorf("evaluating forEach items: %w", err)
		}
		if len(all) != req.Total {
			return activities.RenderItemsResult{}, fmt.Errorf("evaluated %d forEach items, the workflow %d", len(all), req.Total)
		}
		items = all[req.From:req.End]
	}
	var res activities.RenderItemsResult
	size := 0
	if req.ValuesOnly {
		for k, item := range items {
			b, err := json.Marshal(item)
			if err != nil {
				return activities.RenderItemsResult{}, fmt.Errorf("item %d is not JSON: %w", req.From+k, err)
			}
			if k > 0 && (size+len(b) > renderItemsBytes || (stop != nil && stop())) {
				break
			}
			size += len(b)
			res.Values = append(res.Values, item)
		}
		return res, nil
	}
	for k, item := range items {
		if k > 0 && stop != nil && stop() {
			break
		}
		ienv := env
		ienv.Item, ienv.HasItem = item, true
		var it activities.RenderedItem
		if skip, err := pipeline.SkipItem(req.ItemWhen, ienv); err != nil {
			it.Error = err.Error()
		} else if skip != "" {
			it.Skip = skip
		} else if w, err := pipeline.RenderStep(&req.Step, ienv); err != nil {
			it.Error = err.Error()
		} else {
			it = activities.RenderedItem{Container: w.Container, Ray: w.Ray, Spark: w.Spark, Inference: w.Inference, Pipeline: w.Pipeline}
		}
		b, err := json.Marshal(it)
		if err != nil {
			it = activities.RenderedItem{Error: fmt.Sprintf("the rendered item is not JSON: %v", err)}
		}
		if k > 0 && size+len(b) > renderItemsBytes {
			break
		}
		size += len(b)
		res.Items = append(res.Items, it)
	}
	return res, nil
}
