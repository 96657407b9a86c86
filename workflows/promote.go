package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Promote starts a promote step in a native Go pipeline: it points
// p.Alias of p.Model at the version p names (From, an artifact of a step
// of this run as "<step>.<artifact>", or Version) and tells the project's
// endpoints, so those following the alias roll it out. Its outputs are
// {model, alias, version}.
func (r *Run) Promote(ctx workflow.Context, name string, p pipeline.PromoteStep) StepFuture {
	st := r.addStep(name, string(pipeline.KindPromote))
	if f, ok := r.reusedStep(ctx, st); ok {
		return f
	}
	fut, set := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(gctx workflow.Context) {
		out, err := r.runPromote(gctx, st, &p)
		if err == errCancelled {
			err = temporal.NewCanceledError(st.Name)
		}
		set.Set(out, err)
	})
	return StepFuture{f: fut, name: st.Name}
}

// runPromote runs a promote step: it points the alias at the version p
// names, then tells the project's endpoints, as the alias move over REST
// does (workflows/models), through the same activities on the workflow's
// own queue (a local worker's, next to the catalogue). The run is durable
// on its own, so no separate workflow is needed. A From artifact is taken
// from this run's status, not the catalogue, which may not have recorded
// it yet, and registered as the model's version if it is not one.
//
// Promote steps are new: no recorded history holds one, so their commands
// need no GetVersion.
func (r *Run) runPromote(ctx workflow.Context, st *runstate.StepStatus, p *pipeline.PromoteStep) (Outputs, error) {
	now := workflow.Now(ctx)
	st.StartedAt, st.State = &now, runstate.StepRunning
	r.countStepStarted(st)
	r.touch()
	in := activities.MoveModelAliasInput{Project: r.status.Project, Model: p.Model, Alias: p.Alias, Actor: "run " + r.status.RunID}
	if p.From != "" {
		art, problem := r.outputArtifact(ctx, p.From)
		if problem != "" {
			return r.promoteFailed(st, problem)
		}
		in.Artifact = &art
	} else {
		n, ok := pipeline.PromoteVersion(p.Version)
		if !ok {
			return r.promoteFailed(st, fmt.Sprintf("version %q is not a version number", p.Version))
		}
		in.Version = &n
	}
	if ctx.Err() != nil {
		r.endStep(st, runstate.StepCancelled, "", "run cancelled before the alias moved")
		return nil, errCancelled
	}
	// Disconnected from the run's cancellation: a move that may have
	// committed is always followed by telling the endpoints, and the step
	// says what happened. The catalogue and Temporal are retried until
	// they answer, for at most an hour (then the step fails saying why).
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	actx := workflow.WithActivityOptions(dctx, workflow.ActivityOptions{
		TaskQueue:              activities.ControlTaskQueue(workflow.GetInfo(ctx).TaskQueueName),
		StartToCloseTimeout:    time.Minute,
		ScheduleToCloseTimeout: time.Hour,
		RetryPolicy:            &temporal.RetryPolicy{MaximumInterval: 10 * time.Second},
	})
	var res activities.MoveModelAliasResult
	err := workflow.ExecuteActivity(actx, activities.SetModelAliasName, in).Get(actx, &res)
	if err == nil && res.NotFound == "" {
		req := activities.NotifyModelMovedRequest{Project: in.Project, Moved: activities.ModelMoved{Model: p.Model, Alias: p.Alias}}
		err = workflow.ExecuteActivity(actx, activities.NotifyModelMovedName, req).Get(actx, &res.Notified)
	}
	switch {
	case err != nil:
		return r.promoteFailed(st, err.Error())
	case res.NotFound != "":
		return r.promoteFailed(st, res.NotFound)
	}
	out := Outputs{"model": p.Model, "alias": p.Alias, "version": float64(res.Version)}
	st.Outputs = map[string]any(out)
	msg := fmt.Sprintf("%s@%s is version %d", p.Model, p.Alias, res.Version)
	if res.Before != nil {
		msg += fmt.Sprintf(" (was %d)", *res.Before)
	}
	r.endStep(st, runstate.StepSucceeded, "", fmt.Sprintf("%s; %d endpoint(s) told", msg, res.Notified))
	return out, nil
}

// versionPromoteItem guards reading a forEach item's artifact in a
// promote step's From, "<step>[<index>].<artifact>" (workflow.GetVersion
// change ID; never reuse it): before it such a From named a step "<step>[<index>]",
// which no run has. Asked only for a From of that form, so other runs
// carry no marker.
const versionPromoteItem = "atelier.promote-item-artifact"

// outputArtifact finds "<step>.<artifact>" among this run's step outputs,
// or "<step>[<index>].<artifact>" among those of an item of a forEach
// step.
func (r *Run) outputArtifact(ctx workflow.Context, from string) (runstate.Artifact, string) {
	stepName, idx, name, item, ok := pipeline.SplitPromoteFrom(from)
	if ok && item && workflow.GetVersion(ctx, versionPromoteItem, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		stepName, name, ok = pipeline.SplitArtifactRef(from)
		item = false
	}
	if !ok {
		return runstate.Artifact{}, fmt.Sprintf("from %q is not <step>.<artifact>", from)
	}
	st := r.stepByName(stepName)
	if st == nil {
		return runstate.Artifact{}, fmt.Sprintf("from %q: the run has no step %q", from, stepName)
	}
	if item {
		return itemArtifact(from, st, idx, name)
	}
	step := stepName
	for _, a := range st.Artifacts {
		if a.Name == name {
			return a, ""
		}
	}
	if st.Kind == string(pipeline.KindPipeline) && succeeded(st) {
		return runstate.Artifact{}, fmt.Sprintf("from %q: %s", from, missingExport(step, st, name))
	}
	return runstate.Artifact{}, fmt.Sprintf("from %q: step %q (%s) wrote no artifact %q", from, step, st.State, name)
}

func (r *Run) promoteFailed(st *runstate.StepStatus, msg string) (Outputs, error) {
	r.endStep(st, runstate.StepFailed, msg, msg)
	r.notice(st)
	return nil, &StepError{Step: st.Name, Message: msg}
}

// itemArtifact is the artifact name of item idx (rendered) of the forEach
// step st, or why there is none: st is no forEach or a wide one (its
// items are not in the run's status), the index is out of range, the item
// did not succeed or wrote no such artifact.
func itemArtifact(from string, st *runstate.StepStatus, idx, name string) (runstate.Artifact, string) {
	i, ok := pipeline.PromoteItemIndex(idx)
	switch {
	case !ok:
		return runstate.Artifact{}, fmt.Sprintf("from %q: item index %q is not a number (0 for the first item)", from, idx)
	case st.Wide != nil:
		return runstate.Artifact{}, fmt.Sprintf("from %q: step %q is a wide forEach (%d items), whose items are not in the run's status: a promote step reads an item of a forEach of at most the wide threshold", from, st.Name, st.Wide.Items)
	case len(st.Items) == 0:
		return runstate.Artifact{}, fmt.Sprintf("from %q: step %q (%s) has no items (it is not a forEach, or its list was empty)", from, st.Name, st.State)
	case i >= len(st.Items):
		return runstate.Artifact{}, fmt.Sprintf("from %q: step %q (%s) has %d item(s), so no item %d", from, st.Name, st.State, len(st.Items), i)
	}
	it := &st.Items[i]
	if !succeeded(it) {
		msg := fmt.Sprintf("from %q: item %d of step %q did not succeed (%s)", from, i, st.Name, it.State)
		if it.Error != "" {
			msg += ": " + it.Error
		}
		return runstate.Artifact{}, msg
	}
	for _, a := range it.Artifacts {
		if a.Name == name {
			return a, ""
		}
	}
	return runstate.Artifact{}, fmt.Sprintf("from %q: item %d of step %q wrote no artifact %q", from, i, st.Name, name)
}
