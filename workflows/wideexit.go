package workflows

import (
	"errors"

	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
)

// Exit handlers and the pipeline's outputs over a wide step's outputs. The
// steps of the pipeline read them through activities.RenderStepName (wide.go,
// widetemplates.go); exit handlers are a dag of their own whose steps read
// the pipeline's as outer steps (spec.ReferencesWithin), and the outputs
// are evaluated once every step has ended. Both used to render in the
// workflow, over the reference object (WideOutputs) that stands for a wide
// step's outputs in the workflow: a template read {"atelier.wideOutputs":
// …} instead of the list. They now take the activity path like any step.

// versionWideReaders guards that change (workflow.GetVersion change ID;
// never reuse it): before it, exit handlers and outputs were rendered in
// the workflow over the reference object. Asked only where an exit
// handler or an output reads a wide step, so other runs record no marker.
const versionWideReaders = "atelier.wide-exit-outputs"

// outerNames are the steps d's steps may read without depending on them:
// for exit handlers, the pipeline's steps (index len(d.p.Steps)+k in
// d.refs and d.wideRefs is outer step k); none for the pipeline.
func (d *dag) outerNames() []string {
	if d.parent == nil {
		return nil
	}
	names := make([]string, len(d.parent.steps))
	for k, st := range d.parent.steps {
		names[k] = st.Name
	}
	return names
}

// nameOf is the name of step j of d.refs (an outer step past d's own).
func (d *dag) nameOf(j int) string {
	if j < len(d.steps) {
		return d.steps[j].Name
	}
	return d.parent.steps[j-len(d.steps)].Name
}

// references is spec.ReferencesWithin for d, by part.
func (d *dag) references(parts pipeline.RefPart) [][]int {
	return pipeline.ReferencesWithin(d.p, d.outerNames(), parts)
}

// inheritWide gives exit handlers the pipeline's wide steps (d.wideRefs
// past d's own steps) when one of them reads one, in runs from after
// versionWideReaders; earlier runs keep rendering the reference object.
func (d *dag) inheritWide() {
	if d.parent == nil {
		return
	}
	n := len(d.p.Steps)
	reads := false
	for i := range d.refs {
		for _, j := range d.refs[i] {
			reads = reads || (j >= n && d.parent.wideRefs[j-n] != nil)
		}
	}
	if !reads || !d.wideReaders() {
		return
	}
	copy(d.wideRefs[n:], d.parent.wideRefs)
}

func (d *dag) wideReaders() bool {
	return workflow.GetVersion(d.r.root, versionWideReaders, workflow.DefaultVersion, 1) >= 1
}

// evalOutputs evaluates the pipeline's declared outputs once its steps
// have succeeded: in the workflow (no command), or by activities.RenderStepName when
// they read a wide step's outputs, which are not in the workflow.
func (d *dag) evalOutputs() (map[string]any, error) {
	env := d.env()
	refs := pipeline.OutputsReferences(d.p)
	wide := d.wideOf(refs)
	if len(wide) == 0 || !d.wideReaders() {
		return pipeline.EvalOutputs(d.p, env)
	}
	outputs := map[string]any{}
	for _, j := range refs {
		name := d.nameOf(j)
		if se, ok := env.Steps[name]; ok && d.wideRefs[j] == nil {
			outputs[name] = se.Outputs
		}
	}
	req := activities.RenderRequest{PipelineOutputs: d.p.Outputs, Params: env.Params, Outputs: outputs, Wide: wide, Run: env.Run}
	return d.r.renderOutputs(d.ctx, req)
}

// renderOutputs evaluates req.PipelineOutputs by activities.RenderStepName, where
// the wide outputs they read are loaded (pipeline outputs, Run.Reduce).
func (r *Run) renderOutputs(ctx workflow.Context, req activities.RenderRequest) (map[string]any, error) {
	actx := workflow.WithActivityOptions(ctx, renderActivityOptions(r.controlQueue("")))
	var res activities.RenderResult
	if err := workflow.ExecuteActivity(actx, activities.RenderStepName, req).Get(actx, &res); err != nil {
		msg, _, _ := describeActivityError(err)
		return nil, errors.New(msg)
	}
	return res.PipelineOutputs, nil
}
