package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Templates of forEach items over a wide step's outputs. A wide step's
// outputs are not in any workflow (wide.go), so a step that reads them is
// rendered by an activity. For a single step that is one call; a forEach's
// items each render their own templates, and one activity per item would
// load the outputs (up to 64 MiB) once per item. Instead the workflow that
// runs the items (the pipeline's for a small forEach, each batch's for a
// wide one) asks activities.RenderItemsName for a chunk of consecutive items: the
// activity loads the outputs once (and its worker keeps the last ones it
// loaded, activities/foreach), renders items until about
// 512 KiB of rendered work or activities.RenderItemsTime, and returns them.
// The workflow records only the rendered chunk, which its item activities
// would carry anyway, so a batch of 1,000 items pays one or a few more
// activities and its history stays inside its continue-as-new budget.

// wideTemplates reports whether this run renders what runs from before
// versionWideTemplates refused. Call it only where such a refusal was.
func (d *dag) wideTemplates() bool {
	return workflow.GetVersion(d.r.root, versionWideTemplates, workflow.DefaultVersion, 1) >= 1
}

func (d *dag) whenReferences() [][]int {
	if d.whenRefs == nil {
		d.whenRefs = d.references(pipeline.RefWhen)
	}
	return d.whenRefs
}

func (d *dag) itemsReferences() [][]int {
	if d.itemsRefs == nil {
		d.itemsRefs = d.references(pipeline.RefItems)
	}
	return d.itemsRefs
}

func (d *dag) workReferences() [][]int {
	if d.workRefs == nil {
		d.workRefs = d.references(pipeline.RefTemplates)
	}
	return d.workRefs
}

// anyWide reports whether one of steps ran wide.
func (d *dag) anyWide(steps []int) bool {
	for _, j := range steps {
		if d.wideRefs[j] != nil {
			return true
		}
	}
	return false
}

// startRemoteTemplates runs forEach step i whose when or templates read
// wide outputs: its when and list are evaluated where the outputs they
// read are (an activity for wide ones, as startRemoteItems does; the
// workflow otherwise, so a list such as 0..99999 keeps its integers and
// no size limit of its own), then the step runs as any forEach with its
// items rendered by activities.RenderItemsName when its templates read wide outputs.
func (d *dag) startRemoteTemplates(i int, env pipeline.Env, opts []StepOption) {
	s, st := &d.p.Steps[i], d.steps[i]
	listWide := d.anyWide(d.itemsReferences()[i])
	whenWide := d.anyWide(d.whenReferences()[i])
	if d.anyWide(d.workReferences()[i]) {
		if d.remoteWork == nil {
			d.remoteWork = map[int]bool{}
		}
		d.remoteWork[i] = true
	}
	d.running++
	workflow.Go(d.ctx, func(gctx workflow.Context) {
		defer func() { d.running--; d.done[i] = true; d.r.touch() }()
		switch {
		case listWide || whenWide:
			st.Message = "evaluating forEach items over wide outputs"
			mode := renderList
			if !listWide {
				st.Message, mode = "evaluating when over wide outputs", renderWhen
			}
			d.r.touch()
			res, err := d.renderRemote(gctx, i, env, mode)
			st.Message = ""
			if !d.rendered(gctx, i, res, err) {
				return
			}
			if res.Count > 0 {
				d.runWideByRef(gctx, i, env, res.Count)
				return
			}
			if listWide {
				fe := *s.ForEach
				fe.Items = res.Items
				s.ForEach = &fe
			}
		case s.When != "":
			ok, err := pipeline.EvalWhen(s.When, env)
			if err != nil {
				d.fail(i, fmt.Sprintf("evaluating when %q: %v", s.When, err))
				return
			}
			if !ok {
				d.finishStep(i, runstate.StepSkipped, "", fmt.Sprintf("skipped: condition %q is false", s.When))
				return
			}
		}
		d.runForEach(gctx, i, env, opts)
	})
}

// rendered ends step i when renderRemote failed or its when is false, and
// reports whether the step goes on.
func (d *dag) rendered(ctx workflow.Context, i int, res activities.RenderResult, err error) bool {
	switch {
	case err != nil && ctx.Err() != nil:
		d.finishStep(i, runstate.StepCancelled, "", "run cancelled")
	case err != nil:
		msg, _, _ := describeActivityError(err)
		d.fail(i, msg)
	case res.Skip:
		d.finishStep(i, runstate.StepSkipped, "", fmt.Sprintf("skipped: condition %q is false", d.p.Steps[i].When))
	default:
		return true
	}
	return false
}

// itemRendererFor returns the renderer of small forEach step i's items, or
// nil when its templates are rendered in the workflow.
func (d *dag) itemRendererFor(i int, env pipeline.Env, items []any) *itemRenderer {
	if !d.remoteWork[i] {
		return nil
	}
	s := d.p.Steps[i]
	req := activities.RenderItemsRequest{Params: env.Params, Outputs: map[string]pipeline.StepEnv{}, Wide: map[string]runstate.WideRef{}, Run: env.Run, End: len(items), Total: len(items)}
	for _, j := range d.refs[i] {
		name := d.nameOf(j)
		if ref := d.wideRefs[j]; ref != nil {
			if slices.Contains(d.workReferences()[i], j) {
				req.Wide[name] = *ref
			}
		} else if se, ok := env.Steps[name]; ok {
			req.Outputs[name] = se
		}
	}
	req.ItemWhen = s.ForEach.When
	r := &itemRenderer{queue: d.r.controlQueue("")}
	r.req = req
	r.setStep(s, items, 0)
	return r
}

// itemRenderer hands out the rendered work of a forEach's items in index
// order, asking activities.RenderItemsName for the next chunk when the index it is
// asked for is not in the current one. Used from one coroutine at a time
// (the loop that starts items).
type itemRenderer struct {
	req   activities.RenderItemsRequest // From and Items are set per call
	queue string
	// literal holds a literal list's items from index offset on (they
	// travel with each call); nil for an expression list, which the
	// activity evaluates again.
	literal []any
	offset  int
	from    int
	got     []activities.RenderedItem // items from, from+1, ...
}

// setStep sets the step and items the renderer renders: an expression
// list travels as the step's forEach.items, a literal one (items, the
// first of which has index offset) as values.
func (r *itemRenderer) setStep(s pipeline.Step, items []any, offset int) {
	literal := s.ForEach == nil || pipeline.IsLiteralItems(s.ForEach.Items)
	if s.ForEach != nil {
		s.ForEach = &pipeline.ForEach{Items: s.ForEach.Items}
	}
	if literal {
		s.ForEach = nil
		r.literal, r.offset = items, offset
	}
	r.req.Step = s
}

// render returns item k's rendered work (an item whose templates failed
// has Error set); an error means the activity failed for good or ctx was
// cancelled.
func (r *itemRenderer) render(ctx workflow.Context, k int) (activities.RenderedItem, error) {
	if k < r.from || k >= r.from+len(r.got) {
		req := r.req
		req.From = k
		if r.literal != nil {
			req.Items = r.literal[k-r.offset : req.End-r.offset]
		}
		var res activities.RenderItemsResult
		actx := workflow.WithActivityOptions(ctx, renderActivityOptions(r.queue))
		if err := workflow.ExecuteActivity(actx, activities.RenderItemsName, req).Get(actx, &res); err != nil {
			return activities.RenderedItem{}, err
		}
		if len(res.Items) == 0 || k+len(res.Items) > req.End {
			return activities.RenderedItem{}, fmt.Errorf("rendering items from %d: got %d items", k, len(res.Items))
		}
		r.from, r.got = k, res.Items
	}
	it := r.got[k-r.from]
	r.got[k-r.from] = activities.RenderedItem{} // the item activity holds it now
	return it, nil
}

// renderActivityOptions are those of the render activities: on the control
// queue, retried on store errors, never on RenderFailed.
func renderActivityOptions(queue string) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		TaskQueue:           queue,
		StartToCloseTimeout: 5 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 10,
			NonRetryableErrorTypes: []string{activities.ErrTypeRender},
		},
	}
}

// itemWork is the item's stepWork for step s, why it is skipped
// (forEach.when), or its template error.
func itemWork(it activities.RenderedItem, s *pipeline.Step) (stepWork, string, error) {
	if it.Error != "" {
		return stepWork{}, "", errors.New(it.Error)
	}
	if it.Skip != "" {
		return stepWork{}, it.Skip, nil
	}
	w := stepWork{kind: kindOf(*s), container: it.Container, ray: it.Ray, spark: it.Spark, inference: it.Inference, pipeline: it.Pipeline}
	w.gpus, w.gpuType = s.GPURequest()
	return w, "", nil
}

// renderItem is item work rendered in the workflow (env holds the item):
// its forEach.when (itemWhen) first, then its templates, as
// activities.RenderItemsName does for itemWork.
func renderItem(s *pipeline.Step, itemWhen string, env pipeline.Env) (stepWork, string, error) {
	skip, err := pipeline.SkipItem(itemWhen, env)
	if err != nil || skip != "" {
		return stepWork{}, skip, err
	}
	w, err := renderWork(s, env)
	return w, "", err
}
