package workflows

import (
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// ErrTypePipelineFailed is the application error type of a failed run, as
// shown by Temporal's UI and CLI.
const ErrTypePipelineFailed = "PipelineFailed"

// PipelineWorkflow interprets a declarative pipeline spec. It is registered
// as PipelineWorkflowName and must stay deterministic: it walks steps in
// declaration order, never ranges over maps, and reads no clock but
// workflow.Now. A run that succeeds returns the pipeline's outputs (a
// parent's pipeline step takes them); returning a value adds no command,
// so histories recorded when it returned none replay unchanged.
func PipelineWorkflow(ctx workflow.Context, in PipelineInput) (PipelineResult, error) {
	opts := RunOptions{
		Project: in.Project, Pipeline: in.Pipeline, Version: in.Version,
		Params: in.Params, Deadline: in.Spec.Deadline.D(), GPUPriority: in.GPUPriority,
		Parent: in.Parent,
	}
	if in.Reuse != nil {
		opts.RetryOf = in.Reuse.RetryOf
	}
	if in.Cache != nil {
		opts.CacheBypass = in.Cache.Bypass
	}
	r, sctx, err := Begin(ctx, opts)
	if err != nil {
		return PipelineResult{}, err
	}
	r.status.Targets = in.Targets
	// Steps and shared Ray clusters carry their pod settings from here on
	// (batches of a wide forEach too). No command: specs without pipeline
	// pod settings, all those from before them, are unchanged.
	in.Spec.ApplyPodDefaults()
	r.rayTemplates = in.Spec.RayClusters
	d := &dag{r: r, ctx: sctx, in: &in, p: &in.Spec}
	exitSteps, hasExit := r.addExitSteps(in.Spec.OnExit)
	d.run()

	var outputs map[string]any
	if len(d.p.Outputs) > 0 && !r.Cancelled() && !r.DeadlineExceeded() && d.failure == "" && len(in.Targets) == 0 {
		// Declared outputs (none in runs from before them) are evaluated
		// in memory (no command, so no version marker) unless they read
		// a wide step's (wideexit.go).
		if outputs, err = d.evalOutputs(); err != nil {
			d.failure = fmt.Sprintf("evaluating the pipeline's outputs: %v", err)
		}
	}
	var exported []runstate.Artifact
	if len(d.p.Artifacts) > 0 && !r.Cancelled() && !r.DeadlineExceeded() && d.failure == "" && len(in.Targets) == 0 {
		// From the steps' status, in memory: no command (runs from
		// before exports declare none), but for a forEach step's (a
		// fan-in activity, versioned).
		exported = d.exportArtifacts(r.root)
	}
	// The steps' outcome is the run's, whatever the exit handlers do:
	// they are told it (run.state) before they start.
	var state runstate.State
	var errMsg, why string // why: the run's error, or the cancel's reason, for exit handlers
	var ret error
	switch {
	case r.Cancelled():
		r.markUnfinished(runstate.StepCancelled, "not started: run cancelled")
		state, why = runstate.Cancelled, r.cancelReason()
		ret = temporal.NewCanceledError(r.cancelReason())
	case r.DeadlineExceeded():
		r.markUnfinished(runstate.StepSkipped, "not started: pipeline deadline exceeded")
		state, errMsg = runstate.Failed, r.status.Error
		ret = temporal.NewNonRetryableApplicationError(r.status.Error, ErrTypePipelineFailed, nil)
	case d.failure != "":
		r.markUnfinished(runstate.StepSkipped, "not started: "+d.failure)
		state, errMsg = runstate.Failed, d.failure
		ret = temporal.NewNonRetryableApplicationError(d.failure, ErrTypePipelineFailed, nil)
	default:
		state = runstate.Succeeded
		if outputs != nil {
			r.status.Result = outputs
		}
	}
	if why == "" {
		why = errMsg
	}
	if hasExit {
		d.runExit(exitSteps, state, why)
	}
	r.finish(state, errMsg)
	if ret != nil {
		return PipelineResult{}, ret
	}
	return PipelineResult{Outputs: outputs, Artifacts: exported}, nil
}

// exportArtifacts is what a successful run hands a parent's pipeline
// step: each artifact the pipeline exports (pipeline.Spec.Artifacts), the
// reference its step's status holds, under the exported name. An export
// whose step wrote nothing (skipped by when or a trigger rule, or failed
// with continueOn) is left out with a warning on the run: a parent's step
// that reads it fails naming it.
//
// A forEach step's export is a directory of each item's artifact under
// its index, assembled by the fan-in activity (exportFanIn).
func (d *dag) exportArtifacts(ctx workflow.Context) []runstate.Artifact {
	var out []runstate.Artifact
	for _, e := range d.p.Artifacts {
		step, name, _ := pipeline.SplitArtifactRef(e.From)
		st := d.r.stepByName(step)
		if st == nil {
			continue // refused by Validate
		}
		if s := d.specStep(step); s != nil && s.ForEach != nil {
			a, msg := d.exportFanIn(ctx, st, name)
			if msg != "" {
				d.r.status.Warnings = append(d.r.status.Warnings, fmt.Sprintf("exported artifact %q: %s, so this run does not export it", e.Name, msg))
				d.r.touch()
				continue
			}
			a.Name, a.From = e.Name, e.From
			out = append(out, a)
			continue
		}
		found := false
		for _, a := range st.Artifacts {
			if a.Name == name {
				a.Name, a.From = e.Name, e.From
				out = append(out, a)
				found = true
				break
			}
		}
		if !found {
			d.r.status.Warnings = append(d.r.status.Warnings, fmt.Sprintf(
				"exported artifact %q: step %q (%s) has no artifact %q, so this run does not export it", e.Name, step, st.State, name))
			d.r.touch()
		}
	}
	return out
}

// versionExportFanIn guards a child pipeline's export of a forEach
// step's artifact (the fan-in activity, activities.FanInName): such
// exports were refused when a spec was stored before it, so only runs
// that export one ask.
const versionExportFanIn = "atelier.export-fan-in"

// specStep is the spec of the step named name (nil for none).
func (d *dag) specStep(name string) *pipeline.Step {
	for i := range d.p.Steps {
		if d.p.Steps[i].Name == name {
			return &d.p.Steps[i]
		}
	}
	return nil
}

// exportFanIn is the directory of forEach step st's items' artifact name
// (each under its index) that the run exports, or why there is none.
func (d *dag) exportFanIn(ctx workflow.Context, st *runstate.StepStatus, name string) (runstate.Artifact, string) {
	if workflow.GetVersion(ctx, versionExportFanIn, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return runstate.Artifact{}, fmt.Sprintf("step %q is a forEach, whose artifacts this run cannot export", st.Name)
	}
	if st.Wide != nil {
		return d.r.fanIn(ctx, st, name)
	}
	req, ok := d.r.smallFanIn(st, name)
	if !ok {
		return runstate.Artifact{}, fmt.Sprintf("no item of step %q (%s) wrote an artifact %q", st.Name, st.State, name)
	}
	return d.r.runFanIn(ctx, req)
}

// dag is the scheduler state of one PipelineWorkflow execution.
type dag struct {
	r   *Run
	ctx workflow.Context // step context: cancelled on cancel/deadline
	in  *PipelineInput
	p   *pipeline.Spec

	steps   []*runstate.StepStatus
	outputs []any
	started []bool
	done    []bool
	running int
	failure string // first step failure; stops new steps from starting
	// runIf: trigger rules apply (versionRunIf); false when replaying runs
	// from before them.
	runIf bool
	// wanted: the steps a run with targets runs (nil: all of them).
	wanted []bool
	// refs[i] are the steps whose outputs step i reads (d.references:
	// when, forEach.items and templates; for exit handlers, past their own
	// steps, the pipeline's);
	// wideRefs[j] locates the outputs of step j when it ran wide (wide.go).
	refs     [][]int
	wideRefs []*runstate.WideRef
	tmplRefs [][]int // when and templates, when first needed
	// when, forEach.items and templates alone, when first needed
	// (widetemplates.go).
	whenRefs, itemsRefs, workRefs [][]int
	// remoteWork[i]: forEach step i's items are rendered by
	// activities.RenderItemsName, as its templates read wide outputs.
	remoteWork map[int]bool

	// Exit handlers (onexit.go) are a dag of their own: parent is the
	// pipeline's, whose outputs their templates read, and exitEnv what
	// they know of the run's end. A failure among them stops none of the
	// others; only their own context (timeout, a cancel) stops them.
	parent  *dag
	exitEnv *pipeline.RunEnv
}

// interrupted reports whether nothing new may start: the run was
// cancelled or its deadline passed (exit handlers: they were stopped).
func (d *dag) interrupted() bool {
	if d.parent != nil {
		return d.ctx.Err() != nil
	}
	return d.r.Cancelled() || d.r.DeadlineExceeded()
}

// failFast reports whether a step failure stops steps whose rule does not
// run after failures; exit handlers never fail fast.
func (d *dag) failFast() bool {
	return d.failure != "" && d.parent == nil
}

func (d *dag) stopping() bool {
	return d.failure != "" || d.interrupted()
}

// mayDecide reports whether a step whose dependencies are done may be
// decided now (started or skipped by start). Nothing is after a cancel or
// the deadline; after a failure, with trigger rules, every step still is,
// so that allDone and anyFailed steps run and the others end SKIPPED as
// soon as their dependencies are done.
func (d *dag) mayDecide() bool {
	if d.interrupted() {
		return false
	}
	return d.failure == "" || d.runIf
}

func (d *dag) run() {
	n := len(d.p.Steps)
	deps := pipeline.Dependencies(d.p)
	d.outputs = make([]any, n)
	d.started = make([]bool, n)
	d.done = make([]bool, n)
	d.refs = d.references(pipeline.RefWhen | pipeline.RefItems | pipeline.RefTemplates)
	d.wideRefs = make([]*runstate.WideRef, n+len(d.outerNames()))
	d.inheritWide()
	if d.steps == nil { // exit handlers come with theirs, shown since the start
		d.steps = make([]*runstate.StepStatus, n)
		for i, s := range d.p.Steps {
			d.steps[i] = d.r.addStep(s.Name, string(kindOf(s)))
		}
	}
	if d.parent == nil {
		d.runIf = workflow.GetVersion(d.r.root, versionRunIf, workflow.DefaultVersion, 1) >= 1
		d.wanted = wanted(d.in.Targets, d.p, deps)
	}
	// Waiting must survive Temporal's cancel request: running steps are
	// cancelled through d.ctx and we still wait for their cleanup. From
	// d.ctx, not the root: a Go pipeline's ForEach runs a dag on a
	// coroutine of its own, which must block on its own context.
	wait, _ := workflow.NewDisconnectedContext(d.ctx)
	for {
		// Rescan until nothing new starts: a skipped step finishes at once
		// and may unblock steps declared before it.
		for progressed := true; progressed; {
			progressed = false
			for i := 0; i < n && d.mayDecide(); i++ {
				if d.started[i] || !d.depsDone(deps[i]) {
					continue
				}
				d.started[i], progressed = true, true
				d.start(i, deps[i])
			}
		}
		if d.running == 0 && (d.stopping() || d.allStarted()) {
			return
		}
		d.r.publishDetails()
		seen := d.r.status.Seq
		_ = workflow.Await(wait, func() bool { return d.r.status.Seq != seen })
	}
}

// wanted marks the steps a run with targets runs: the targets and their
// dependencies, transitively (nil: every step). Unknown names were refused
// when the run was started.
func wanted(targets []string, p *pipeline.Spec, deps [][]int) []bool {
	if len(targets) == 0 {
		return nil
	}
	index := make(map[string]int, len(p.Steps))
	for i, s := range p.Steps {
		index[s.Name] = i
	}
	out := make([]bool, len(p.Steps))
	var visit func(i int)
	visit = func(i int) {
		if out[i] {
			return
		}
		out[i] = true
		for _, j := range deps[i] {
			visit(j)
		}
	}
	for _, t := range targets {
		if i, ok := index[t]; ok {
			visit(i)
		}
	}
	return out
}

func (d *dag) depsDone(deps []int) bool {
	for _, j := range deps {
		if !d.done[j] {
			return false
		}
	}
	return true
}

func (d *dag) allStarted() bool {
	for _, s := range d.started {
		if !s {
			return false
		}
	}
	return true
}

// start decides whether step i runs or is skipped, and launches it.
func (d *dag) start(i int, deps []int) {
	s, st := &d.p.Steps[i], d.steps[i]
	if d.wanted != nil && !d.wanted[i] {
		d.finishStep(i, runstate.StepSkipped, "", "skipped: not needed by the run's targets ("+strings.Join(d.in.Targets, ", ")+")")
		return
	}
	if !d.triggered(i, deps) {
		return
	}
	env := d.env()
	if re := d.in.Reuse.Step(s.Name); re != nil && re.Done {
		if ref, ok := runstate.WideRefOf(re.Outputs); ok {
			// A wide step reused by a retry: its outputs stay where the
			// retried run stored them.
			d.wideRefs[i] = &ref
			st.Wide = &runstate.WideStatus{Items: ref.Items, Outputs: &ref}
		}
	}
	if d.readsWide(i) {
		// when and templates read wide outputs, which are not in this
		// workflow: an activity renders them (wide.go).
		if re := d.in.Reuse.Step(s.Name); re != nil && re.Done {
			st.Outputs = re.Outputs
			d.outputs[i] = re.Outputs
			d.finishStep(i, runstate.StepCached, "", "reused from run "+d.in.Reuse.RetryOf)
			return
		}
		d.startRemote(i, env, stepOptions(s, d.p))
		return
	}
	if s.When != "" {
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
	if re := d.in.Reuse.Step(s.Name); re != nil && re.Done {
		// A retry: the step succeeded in the retried run; nothing runs.
		st.Outputs, st.Artifacts, st.Metrics = re.Outputs, re.Artifacts, re.Metrics
		st.CachedFrom = d.in.Reuse.SourceFor(re.Source, s.Name, nil)
		d.outputs[i] = re.Outputs
		d.finishStep(i, runstate.StepCached, "", reusedMessage(st.CachedFrom))
		return
	}
	opts := stepOptions(s, d.p)
	d.running++
	workflow.Go(d.ctx, func(gctx workflow.Context) {
		defer func() { d.running--; d.done[i] = true; d.r.touch() }()
		if s.ForEach != nil {
			d.runForEach(gctx, i, env, opts)
			return
		}
		if kindOf(*s) == pipeline.KindApproval {
			a, err := pipeline.RenderApproval(s.Approval, env)
			if err != nil {
				d.fail(i, fmt.Sprintf("rendering templates: %v", err))
				return
			}
			out, err := d.r.runApproval(gctx, st, a, s.Timeout.D(), d.stopWaiting(s))
			d.record(i, out, err)
			return
		}
		if kindOf(*s) == pipeline.KindPromote {
			p, err := pipeline.RenderPromote(s.Promote, env)
			if err != nil {
				d.fail(i, fmt.Sprintf("rendering templates: %v", err))
				return
			}
			out, err := d.r.runPromote(gctx, st, p)
			d.record(i, out, err)
			return
		}
		w, err := renderWork(s, env)
		if err != nil {
			d.fail(i, fmt.Sprintf("rendering templates: %v", err))
			return
		}
		out, err := d.r.runWork(gctx, st, s.Name, nil, w, opts...)
		d.record(i, out, err)
	})
}

// stopWaiting ends the wait of an approval step once another step has
// failed, unless its rule runs after failures: nothing downstream of it
// would start, and a run that has failed must not wait for a person.
func (d *dag) stopWaiting(s *pipeline.Step) func() string {
	return func() string {
		if d.failure != "" && !s.RunIf.RunsAfterFailure() {
			return d.failure
		}
		return ""
	}
}

// triggered applies step i's trigger rule to its dependencies, and the
// run's fail-fast rule after a failure; a step that may not run ends
// SKIPPED with the reason and false is returned.
func (d *dag) triggered(i int, deps []int) bool {
	if !d.runIf {
		// Runs from before trigger rules: every dependency must succeed.
		for _, j := range deps {
			if d.steps[j].State != runstate.StepSucceeded {
				d.finishStep(i, runstate.StepSkipped, "", fmt.Sprintf("skipped: dependency %q %s", d.steps[j].Name, strings.ToLower(string(d.steps[j].State))))
				return false
			}
		}
		return true
	}
	parents := make([]*runstate.StepStatus, len(deps))
	for k, j := range deps {
		parents[k] = d.steps[j]
	}
	rule := d.p.Steps[i].RunIf
	if ok, why := runIfMet(rule, parents); !ok {
		d.finishStep(i, runstate.StepSkipped, "", "skipped: "+why)
		return false
	}
	if d.failFast() && !rule.RunsAfterFailure() {
		// The same reason runs from before trigger rules got at the end.
		d.finishStep(i, runstate.StepSkipped, "", "not started: "+d.failure)
		return false
	}
	return true
}

// runForEach runs one container per item with bounded parallelism; the
// first failed item stops new items from starting.
func (d *dag) runForEach(ctx workflow.Context, i int, env pipeline.Env, opts []StepOption) {
	s, st := &d.p.Steps[i], d.steps[i]
	items, err := pipeline.EvalItems(s.ForEach, env)
	if err != nil {
		d.fail(i, fmt.Sprintf("evaluating forEach items: %v", err))
		return
	}
	if len(items) > pipeline.WideThreshold {
		if workflow.GetVersion(ctx, versionWide, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			// Replaying a run from before wide steps: it failed here.
			d.fail(i, fmt.Sprintf("evaluating forEach items: forEach.items: %d items; the limit is %d", len(items), pipeline.WideThreshold))
			return
		}
		d.runWide(ctx, i, env, items, len(items))
		return
	}
	now := workflow.Now(ctx)
	st.State, st.StartedAt = runstate.StepRunning, &now
	st.Items = make([]runstate.StepStatus, len(items))
	for k := range items {
		st.Items[k] = runstate.StepStatus{Name: fmt.Sprintf("%s[%d]", s.Name, k), Kind: st.Kind, State: runstate.StepPending, Item: items[k]}
	}
	d.r.touch()
	par := s.ForEach.Parallelism
	if par <= 0 {
		par = pipeline.DefaultParallelism
	}
	outs := make([]any, len(items))
	active, itemFailure := 0, ""
	// failed items; the policy decides how many are tolerated and whether
	// new items stop once there are more (by default: none; yes).
	failed, skipped := 0, 0 // skipped: forEach.when was false
	tolerated, stopEarly := s.ForEach.FailurePolicy.Tolerated(len(items)), s.ForEach.FailurePolicy.StopsEarly()
	wait, _ := workflow.NewDisconnectedContext(ctx)
	// Another step's failure stops new items, except in a step whose rule
	// runs after failures (it may have started because of one).
	runFailed := func() bool { return d.failFast() && !s.RunIf.RunsAfterFailure() }
	reused := d.in.Reuse.Step(s.Name)
	// Templates over wide outputs: rendered by an activity, a chunk of
	// items at a time (widetemplates.go); renderFailure: it failed for good.
	rend, renderFailure := d.itemRendererFor(i, env, items), ""
	for k := range items {
		_ = workflow.Await(wait, func() bool { return active < par })
		if (stopEarly && failed > tolerated) || ctx.Err() != nil || runFailed() {
			break
		}
		if re := reused.Item(k, items[k]); re != nil {
			// A retry: this item succeeded in the retried run.
			outs[k] = re.Outputs
			st.Items[k].Outputs = re.Outputs
			st.Items[k].CachedFrom = d.in.Reuse.SourceFor(re.Source, s.Name, &k)
			d.r.endStep(&st.Items[k], runstate.StepCached, "", reusedMessage(st.Items[k].CachedFrom))
			continue
		}
		var pre *activities.RenderedItem
		if rend != nil {
			it, err := rend.render(ctx, k)
			if err != nil {
				if ctx.Err() == nil {
					msg, _, _ := describeActivityError(err)
					renderFailure = fmt.Sprintf("rendering the templates of item %d over wide outputs: %s", k, msg)
				}
				break
			}
			pre = &it
		}
		k := k
		active++
		workflow.Go(ctx, func(gctx workflow.Context) {
			defer func() { active--; d.r.touch() }()
			var w stepWork
			var skip string
			var err error
			if pre != nil {
				w, skip, err = itemWork(*pre, s)
			} else {
				ienv := env
				ienv.Item, ienv.HasItem = items[k], true
				w, skip, err = renderItem(s, s.ForEach.When, ienv)
			}
			if err == nil && skip != "" {
				skipped++
				d.r.endStep(&st.Items[k], runstate.StepSkipped, "", skip)
				return
			}
			if err != nil {
				d.r.endStep(&st.Items[k], runstate.StepFailed, fmt.Sprintf("rendering templates: %v", err), "")
				failed++
				if itemFailure == "" {
					itemFailure = fmt.Sprintf("item %d: rendering templates: %v", k, err)
				}
				return
			}
			out, err := d.r.runWork(gctx, &st.Items[k], s.Name, &k, w, opts...)
			if err == nil {
				outs[k] = map[string]any(out)
			}
			if err != nil && !isCancelled(err) {
				failed++
				if itemFailure == "" {
					itemFailure = fmt.Sprintf("item %d: %v", k, err)
				}
			}
		})
	}
	_ = workflow.Await(wait, func() bool { return active == 0 })
	// Items that never started mean the step is not done, whatever stopped
	// it: it must never read as SUCCEEDED with partial outputs.
	notRun := 0
	for k := range st.Items {
		if st.Items[k].State == runstate.StepPending {
			notRun++
		}
	}
	never := func(why string) string {
		return fmt.Sprintf("%s; %d of %d items never ran", why, notRun, len(items))
	}
	switch {
	case renderFailure != "":
		d.r.markStepUnfinished(st, runstate.StepSkipped, "not started: rendering templates failed")
		d.fail(i, never(renderFailure))
	case failed > tolerated && tolerated > 0:
		d.r.markStepUnfinished(st, runstate.StepSkipped, "not started: too many items failed")
		d.fail(i, never(fmt.Sprintf("%d of %d items failed, more than the %v%% tolerated; first: %s", failed, len(items), s.ForEach.FailurePolicy.MaxFailedPercent, itemFailure)))
	case failed > tolerated:
		d.r.markStepUnfinished(st, runstate.StepSkipped, "not started: another item failed")
		d.fail(i, never(itemFailure))
	case ctx.Err() != nil:
		d.r.markStepUnfinished(st, runstate.StepCancelled, "not started: run cancelled")
		d.finishStep(i, runstate.StepCancelled, "", never("run cancelled"))
	case notRun > 0:
		d.r.markStepUnfinished(st, runstate.StepSkipped, "not started: "+d.failure)
		d.finishStep(i, runstate.StepCancelled, "", never("stopped: "+d.failure))
	case allCached(st.Items):
		// Nothing ran: the step reads as its items do.
		d.outputs[i] = outs
		st.Outputs = outs
		d.finishStep(i, runstate.StepCached, "", "every item reused (see each item)")
	default:
		d.outputs[i] = outs
		st.Outputs = outs
		var msgs []string
		if failed > 0 {
			msgs = append(msgs, fmt.Sprintf("%d of %d items failed (tolerated: at most %v%%); their outputs are null", failed, len(items), s.ForEach.FailurePolicy.MaxFailedPercent))
		}
		if skipped > 0 {
			msgs = append(msgs, skippedMessage(skipped, len(items), s.ForEach.When))
		}
		d.finishStep(i, runstate.StepSucceeded, "", strings.Join(msgs, "; "))
	}
}

// skippedMessage is a forEach step's message for the items its
// forEach.when skipped.
func skippedMessage(skipped, n int, when string) string {
	return fmt.Sprintf("%d of %d items skipped (forEach.when %q is false for them); their outputs are null", skipped, n, when)
}

// allCached reports whether every item (at least one) was CACHED.
func allCached(items []runstate.StepStatus) bool {
	for k := range items {
		if items[k].State != runstate.StepCached {
			return false
		}
	}
	return len(items) > 0
}

func (d *dag) record(i int, out Outputs, err error) {
	switch {
	case err == nil:
		d.outputs[i] = map[string]any(out)
	case isCancelled(err):
		// runContainer already marked the step CANCELLED.
	default:
		d.failed(i, stepErrMessage(err))
	}
}

func (d *dag) fail(i int, msg string) {
	d.finishStep(i, runstate.StepFailed, msg, "")
	d.failed(i, msg)
}

// failed records that step i FAILED: the run fails (and fails fast),
// unless the step's failure is handled (continueOn: failed), which leaves
// a warning instead.
func (d *dag) failed(i int, msg string) {
	if d.p.Steps[i].ContinueOn == pipeline.ContinueOnFailed {
		d.r.status.Warnings = append(d.r.status.Warnings, fmt.Sprintf("step %q failed (continueOn: failed, the run goes on): %s", d.steps[i].Name, msg))
		d.r.touch()
		return
	}
	if d.failure == "" {
		d.failure = fmt.Sprintf("step %q failed: %s", d.steps[i].Name, msg)
	}
}

func (d *dag) finishStep(i int, state runstate.StepState, errMsg, msg string) {
	d.r.endStep(d.steps[i], state, errMsg, msg)
	d.done[i] = true
}

// env is the expression environment: params, outputs of finished steps, run.
// Exit handlers also see the pipeline's steps and how the run ends.
func (d *dag) env() pipeline.Env {
	steps := make(map[string]pipeline.StepEnv, len(d.steps))
	for x := d; x != nil; x = x.parent {
		for j, st := range x.steps {
			if st.State == runstate.StepSucceeded || st.State == runstate.StepCached { // CACHED: reused by a retry
				steps[st.Name] = pipeline.StepEnv{Outputs: x.outputs[j]}
			}
		}
	}
	run := pipeline.RunEnv{ID: d.r.ID(), Project: d.r.Project(), Pipeline: d.in.Pipeline}
	if d.exitEnv != nil {
		run = *d.exitEnv
		run.ID, run.Project, run.Pipeline = d.r.ID(), d.r.Project(), d.in.Pipeline
	}
	return pipeline.Env{Params: d.in.Params, Steps: steps, Run: run}
}

// renderWork evaluates a step's templates for one execution (or item).
func renderWork(s *pipeline.Step, env pipeline.Env) (stepWork, error) {
	r, err := pipeline.RenderStep(s, env)
	w := stepWork{kind: kindOf(*s), container: r.Container, ray: r.Ray, spark: r.Spark, inference: r.Inference, pipeline: r.Pipeline}
	w.gpus, w.gpuType = s.GPURequest()
	return w, err
}

func stepOptions(s *pipeline.Step, p *pipeline.Spec) []StepOption {
	var opts []StepOption
	if pl := s.EffectivePlacement(p); pl != nil {
		opts = append(opts, WithPlacement(pl))
	}
	if s.Timeout > 0 {
		opts = append(opts, WithTimeout(s.Timeout.D()))
	}
	if s.Retries != nil {
		opts = append(opts, WithRetries(*s.Retries))
	}
	if c := s.EffectiveCache(p); c != nil {
		opts = append(opts, WithCache(c))
	}
	if len(s.Metrics) > 0 {
		opts = append(opts, WithMetrics())
	}
	return opts
}

func kindOf(s pipeline.Step) pipeline.StepKind {
	if s.Kind == "" {
		return pipeline.KindContainer
	}
	return s.Kind
}

func isCancelled(err error) bool {
	return err == errCancelled
}

func stepErrMessage(err error) string {
	if se, ok := err.(*StepError); ok {
		return se.Message
	}
	return err.Error()
}
