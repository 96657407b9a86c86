package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/schema"
)

// The Go API's forEach. A loop of Run.Container calls runs every item in
// the pipeline's own workflow, so its history bounds it to a few thousand
// steps. Run.ForEach hands the items to the declarative forEach instead
// (a one-step dag over the Go run): up to spec.WideThreshold items run in
// this workflow as a declarative forEach's do, more (up to
// spec.MaxForEachItems) run wide in batch workflows with their outputs in
// Postgres, read back by Run.Reduce. Items, parallelism, the
// failure policy, retries, timeouts, caching, a retry's reuse and the
// status (items or counts, the items endpoint) are the declarative ones.

// ForEachItems are the items of Run.ForEach and how they run.
type ForEachItems struct {
	// Items is a slice (any element type that encodes to JSON; structs
	// are seen by templates through their JSON field names) or a string
	// expression of the declarative language, such as "0..99999", which
	// is never materialised in the pipeline's workflow when it runs wide.
	Items any
	// Parallelism bounds the items in flight (0: spec.DefaultParallelism).
	Parallelism int
	// FailurePolicy decides what failed items do to the step (nil: the
	// first failure fails it).
	FailurePolicy *pipeline.FailurePolicy
}

// ForEachFuture is the pending result of Run.ForEach.
type ForEachFuture struct {
	f    workflow.Future
	name string
}

// Name is the (unique) name the step got in the run status.
func (f ForEachFuture) Name() string { return f.name }

// Get blocks (deterministically) until every item has ended. A failed
// step returns a *StepError; a cancelled one an error for which
// temporal.IsCanceledError is true.
func (f ForEachFuture) Get(ctx workflow.Context) (ForEachResult, error) {
	var res ForEachResult
	err := f.f.Get(ctx, &res)
	return res, err
}

// ForEachResult is what a Run.ForEach step produced.
type ForEachResult struct {
	// Step is the step's name in the run status.
	Step string `json:"step"`
	// Items is the length of the list.
	Items int `json:"items"`
	// Outputs are the items' outputs in item order (nil for failed items
	// the failure policy tolerated); nil when the items ran wide, whose
	// outputs stay in Postgres: read them with Run.Reduce.
	Outputs []Outputs `json:"outputs,omitempty"`
	// Wide locates the outputs of items that ran wide (nil otherwise).
	Wide *runstate.WideRef `json:"wide,omitempty"`
}

// Reduce evaluates expr, an expression of the declarative language, over
// the outputs of res's items, which it names steps.<res.Step>.outputs (a
// list): "sum(map(steps.square.outputs, .v))". Outputs that ran wide are
// read by an activity (activities.RenderStepName) with its larger expression budget;
// the result is at most spec.MaxOutputsBytes of JSON, as a pipeline's
// outputs.
func (r *Run) Reduce(ctx workflow.Context, res ForEachResult, expr string) (any, error) {
	tmpl := map[string]string{"value": "{{ " + expr + " }}"}
	if res.Wide == nil {
		list := make([]any, len(res.Outputs))
		for k, o := range res.Outputs {
			if o != nil {
				list[k] = map[string]any(o)
			}
		}
		env := pipeline.Env{Steps: map[string]pipeline.StepEnv{res.Step: {Outputs: list}}}
		out, err := pipeline.EvalOutputs(&pipeline.Spec{Outputs: tmpl}, env)
		if err != nil {
			return nil, fmt.Errorf("reducing the outputs of %s: %w", res.Step, err)
		}
		return out["value"], nil
	}
	out, err := r.renderOutputs(ctx, activities.RenderRequest{PipelineOutputs: tmpl, Wide: map[string]runstate.WideRef{res.Step: *res.Wide}})
	if err != nil {
		return nil, fmt.Errorf("reducing the outputs of %s: %w", res.Step, err)
	}
	return out["value"], nil
}

// ForEach starts a container step that runs c once per item: {{ item }}
// in c's templates is the item ({{ item.path }} for an object). It is the
// declarative forEach (see ForEachItems and the package comment above),
// so it scales where a loop of Container calls cannot. Step options apply
// to every item (retries and timeout per item; placement and caching as
// for a declarative forEach). ctx must come from Begin. A step name that
// repeats gets a numeric suffix.
//
//	f := run.ForEach(ctx, "square", workflows.ForEachItems{Items: "0..9999", Parallelism: 200},
//		pipeline.Container{Command: []string{"sh", "-c", `echo "{\"v\": $(({{ item }} * {{ item }}))}" > $ATELIER_OUTPUTS`}})
//	res, err := f.Get(ctx)
//	total, err := run.Reduce(ctx, res, "sum(map(steps.square.outputs, .v))")
func (r *Run) ForEach(ctx workflow.Context, name string, items ForEachItems, c pipeline.Container, opts ...StepOption) ForEachFuture {
	st := r.addStep(name, string(pipeline.KindContainer))
	fut, set := workflow.NewFuture(ctx)
	step, err := forEachStep(st.Name, items, c, opts)
	if err != nil {
		now := workflow.Now(ctx)
		st.StartedAt = &now
		r.endStep(st, runstate.StepFailed, err.Error(), "")
		set.Set(nil, &StepError{Step: st.Name, Message: err.Error()})
		return ForEachFuture{f: fut, name: st.Name}
	}
	workflow.Go(ctx, func(gctx workflow.Context) {
		in := &PipelineInput{Project: r.status.Project, Pipeline: r.status.Pipeline, Reuse: r.goReuse}
		d := &dag{r: r, ctx: gctx, in: in, p: &pipeline.Spec{Steps: []pipeline.Step{step}}, steps: []*runstate.StepStatus{st}}
		d.run()
		switch st.State {
		case runstate.StepSucceeded, runstate.StepCached:
			set.Set(forEachResult(st.Name, d.outputs[0], d.wideRefs[0]), nil)
		case runstate.StepCancelled:
			set.Set(nil, temporal.NewCanceledError(st.Name))
		default:
			msg := st.Error
			if msg == "" {
				msg = st.Message
			}
			set.Set(nil, &StepError{Step: st.Name, Message: msg})
		}
	})
	return ForEachFuture{f: fut, name: st.Name}
}

// forEachStep is the declarative step Run.ForEach runs.
func forEachStep(name string, items ForEachItems, c pipeline.Container, opts []StepOption) (pipeline.Step, error) {
	raw, err := forEachList(items.Items)
	if err != nil {
		return pipeline.Step{}, err
	}
	var cfg stepConfig
	for _, o := range opts {
		o(&cfg)
	}
	s := pipeline.Step{
		Name:      name,
		ForEach:   &pipeline.ForEach{Items: raw, Parallelism: items.Parallelism, FailurePolicy: items.FailurePolicy},
		Container: &c,
		Timeout:   schema.Duration(cfg.timeout),
		Placement: cfg.placement,
		Cache:     cfg.cache,
	}
	if cfg.retries != (pipeline.Retries{}) {
		r := cfg.retries
		s.Retries = &r
	}
	switch {
	case items.Parallelism < 0 || items.Parallelism > pipeline.MaxParallelism:
		return pipeline.Step{}, fmt.Errorf("parallelism %d: use 1 to %d (0 for the default)", items.Parallelism, pipeline.MaxParallelism)
	case items.FailurePolicy != nil && (items.FailurePolicy.MaxFailedPercent < 0 || items.FailurePolicy.MaxFailedPercent > 100):
		return pipeline.Step{}, fmt.Errorf("failure policy: maxFailedPercent %v is not a percentage (0 to 100)", items.FailurePolicy.MaxFailedPercent)
	}
	return s, nil
}

// forEachList encodes ForEachItems.Items as a forEach list: a JSON array
// for a slice, a JSON string for an expression.
func forEachList(items any) (json.RawMessage, error) {
	if s, ok := items.(string); ok {
		if s == "" {
			return nil, errors.New("forEach items: an empty expression")
		}
		return json.Marshal(s)
	}
	if items == nil {
		return nil, errors.New("forEach items: none (give a slice or an expression such as \"0..99\")")
	}
	if k := reflect.TypeOf(items).Kind(); k != reflect.Slice && k != reflect.Array {
		return nil, fmt.Errorf("forEach items: a %T is neither a slice nor an expression string", items)
	}
	b, err := json.Marshal(items)
	if err != nil {
		return nil, fmt.Errorf("forEach items are not JSON: %w", err)
	}
	return b, nil
}

// forEachResult is the result of a forEach step that succeeded: its outputs
// ([]any of objects or nil, as runForEach leaves them, or a retry's
// reused list after a JSON round trip) or, wide, where they are.
func forEachResult(name string, outputs any, wide *runstate.WideRef) ForEachResult {
	if wide == nil {
		if ref, ok := runstate.WideRefOf(outputs); ok {
			wide = &ref // a wide step a retry reused
		}
	}
	if wide != nil {
		return ForEachResult{Step: name, Items: wide.Items, Wide: wide}
	}
	list, _ := outputs.([]any)
	res := ForEachResult{Step: name, Items: len(list), Outputs: make([]Outputs, len(list))}
	for k, o := range list {
		if m, ok := o.(map[string]any); ok {
			res.Outputs[k] = m
		}
	}
	return res
}
