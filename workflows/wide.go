package workflows

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// A wide forEach is one over more than spec.WideThreshold items. One
// workflow cannot hold it (51,200 history events, 2,000 pending
// activities, 2 MB payloads), so the pipeline workflow splits the list into
// contiguous batches and runs each in a child workflow
// (ForEachBatchWorkflow, widebatch.go), a sliding window of them at a time;
// each batch runs its items with its own window and continues as new
// before its history grows large. Item states and outputs go to Postgres
// (step_items) in batches; the pipeline's status holds counts and the first
// failures; steps that read the outputs are rendered by an activity that
// loads them (activities.RenderStepName). docs/architecture.md, "Wide forEach", has
// the whole design and its numbers.

// versionWide guards the wide path: before it, a forEach list over 1,000
// items failed the step (workflow.GetVersion change ID; never reuse it).
const versionWide = "atelier.wide-foreach"

// versionWideTemplates guards the templates that read a wide step's
// outputs beyond a single step's (widetemplates.go): before it, those of
// a forEach step (wide or not) and of an approval step failed the step,
// and so did a wide forEach whose list was computed from wide outputs.
// Asked only where one of those refusals happened, so runs that meet none
// record no marker.
const versionWideTemplates = "atelier.wide-templates"

// versionWideKube guards wide container steps with a placement, whose
// items run as Kubernetes Jobs on a cluster the pipeline workflow chose
// once: before it, wideUnsupported failed such a step. Asked only there.
const versionWideKube = "atelier.wide-kube"

// Sizing of a wide step (see planWide).
const (
	// wideChildParallelism is the most items one batch runs at once: one
	// workflow's tasks are processed one at a time, so a step's
	// parallelism is spread over several batches.
	wideChildParallelism = 100
	// wideEnvBytes bounds the params and outputs a wide step's templates
	// read, which every batch's input carries.
	wideEnvBytes = 256 << 10
)

// widePlan is how a wide step's items are split.
type widePlan struct {
	batches  [][2]int // [start, end) of each batch
	childPar int      // items in flight per batch, at most
	window   int      // batches in flight
	// slots are the items in flight of each window slot: childPar, but
	// the last one less when childPar does not divide the parallelism, so
	// the batches in flight never run more than it in all.
	slots []int
}

// planWide splits n items run par at a time: batches of up to
// spec.WideBatchMax items, each running up to wideChildParallelism items,
// at least two batches in flight when par allows (so one batch's tail
// does not idle the step), and about four batches per window slot, so the
// window slides rather than steps.
func planWide(n, par int) widePlan {
	par = max(par, 1)
	childPar := min(par, wideChildParallelism)
	if par >= 2 {
		childPar = min(childPar, (par+1)/2)
	}
	window := (par + childPar - 1) / childPar
	size := min(pipeline.WideBatchMax, max(childPar*2, (n+window*4-1)/(window*4)))
	p := widePlan{childPar: childPar, window: window}
	for left := par; left > 0; left -= childPar {
		p.slots = append(p.slots, min(childPar, left))
	}
	for start := 0; start < n; start += size {
		p.batches = append(p.batches, [2]int{start, min(start+size, n)})
	}
	return p
}

// WidePlan is how a wide step of n items at parallelism par is split:
// batches of batchSize items (the last may be shorter), each running
// perBatch items at once, window batches at once. bench/fanout runs its
// hand-written baseline with the same numbers.
func WidePlan(n, par int) (batchSize, perBatch, window int) {
	p := planWide(n, par)
	if len(p.batches) > 0 {
		batchSize = p.batches[0][1] - p.batches[0][0]
	}
	return batchSize, p.childPar, p.window
}

// BatchInput is the input of ForEachBatchWorkflow: the items [Start, End)
// of one wide step, and where it is (Next) after continues-as-new.
//
// Item values do not travel when the list is an expression: the batch
// evaluates it again over the same params and outputs (deterministic, and
// the values then have the types the pipeline workflow saw, e.g. integers
// from a range, which a JSON round trip would turn into floats) and takes
// its slice. A literal list (at most spec.MaxSpecBytes in all) travels
// as the batch's slice in Items.
type BatchInput struct {
	RunID    string `json:"runId"`
	Project  string `json:"project"`
	Pipeline string `json:"pipeline"`
	// Step is the step's spec; Step.ForEach.Items is the expression, or
	// absent for a literal list.
	Step pipeline.Step `json:"step"`
	// ItemWhen is the step's forEach.when, evaluated per item.
	ItemWhen string `json:"itemWhen,omitempty"`
	// Params and Outputs (of the steps it reads) make the expression
	// environment besides item.
	Params  map[string]any              `json:"params,omitempty"`
	Outputs map[string]pipeline.StepEnv `json:"outputs,omitempty"`
	// Wide are the wide steps whose outputs the step's templates read:
	// the batch has its items rendered by activities.RenderItemsName.
	Wide map[string]runstate.WideRef `json:"wide,omitempty"`
	// ListWide are the wide steps the list expression reads when the
	// list was too large to travel (MaxRenderedItems): the batch fetches
	// its items by activities.RenderItemsName (ValuesOnly).
	ListWide map[string]runstate.WideRef `json:"listWide,omitempty"`
	Start    int                         `json:"start"`
	End      int                         `json:"end"`
	// Total is the length of the whole list.
	Total int   `json:"total"`
	Items []any `json:"items,omitempty"` // literal lists: items [Start, End)
	// Next is the first item not started yet (Start on the first run).
	Next        int `json:"next"`
	Parallelism int `json:"parallelism"`
	// StopAfter stops new items once this batch has that many failures
	// more than it was told of (-1: never; failurePolicy continue).
	StopAfter int  `json:"stopAfter"`
	Stopped   bool `json:"stopped,omitempty"`
	// ReuseFrom is the run a retry takes succeeded items from; Reused are
	// the indexes taken (filled by the first run of the batch).
	ReuseFrom string `json:"reuseFrom,omitempty"`
	Reused    []int  `json:"reused,omitempty"`
	ReuseDone bool   `json:"reuseDone,omitempty"`
	// Result so far (carried over continue-as-new).
	Result BatchResult `json:"result"`
	// Cluster is where the items run, for a container step with a
	// placement; nil: the local runtime.
	Cluster *runstate.WideCluster `json:"cluster,omitempty"`
}

// BatchResult is what a batch reports to the pipeline workflow.
type BatchResult struct {
	Counts   runstate.ItemCounts    `json:"counts"`
	Failures []runstate.ItemFailure `json:"failures,omitempty"`
	// Error is set when items could not be recorded (the step fails).
	Error string `json:"error,omitempty"`
}

// batchID is the workflow ID of a wide step's batch k: derived from the
// run, so a restarted worker replays the same children.
func batchID(runID, step string, k int) string {
	return fmt.Sprintf("%s.%s.batch-%d", runID, step, k)
}

// wideUnsupported says why step s cannot run wide (or ""). Its items run
// as a small forEach's do, without anything per item beyond the item's own
// activities: a container on the local runtime, or, with a placement, a
// Kubernetes Job on the cluster chosen once for the step (wideCluster).
// What needs more per item stays out: GPU admission (a workload per item,
// queued and possibly preempted), and the kinds that run through their
// own workflows or clusters (ray, spark, inference, pipeline).
func wideUnsupported(s *pipeline.Step, p *pipeline.Spec) string {
	kind, placed := kindOf(*s), s.EffectivePlacement(p) != nil
	switch {
	case kind != pipeline.KindContainer:
		return fmt.Sprintf("a forEach over more than %d items runs container steps only (this is a %s step, whose items would each need their own admission or cluster objects, which wide steps do not manage yet); use fewer items or split the list", pipeline.WideThreshold, kind)
	case placed && s.Container != nil && s.Container.Resources != nil && s.Container.Resources.GPU > 0:
		return fmt.Sprintf("a forEach over more than %d items cannot request GPUs on a cluster yet (container.resources.gpu: %d; each item would need its own GPU admission); use fewer items, split the list, or run the items without GPUs", pipeline.WideThreshold, s.Container.Resources.GPU)
	}
	return ""
}

// wideKubeRefused is the step error of a wide container step with a
// placement in runs from before versionWideKube.
func wideKubeRefused() string {
	return fmt.Sprintf("a forEach over more than %d items runs container steps on the local runtime only (this is a container step with a placement); use fewer items or split the list", pipeline.WideThreshold)
}

// wideCluster chooses the cluster of every item of wide step i (a
// container step with a placement): once, here, not per item as a small
// forEach does, since at 100,000 items a selection per item would double
// the item activities and the batches' histories. The run then sweeps the
// cluster when it ends (useCluster), however its batches ended. The cost:
// all items of the step go to one cluster, chosen when the step starts.
// ok is false when the step has ended (no cluster, or cancelled).
func (d *dag) wideCluster(ctx workflow.Context, i int, p *pipeline.Placement) (*runstate.WideCluster, bool) {
	s, st := &d.p.Steps[i], d.steps[i]
	st.Message = "choosing a cluster"
	d.r.touch()
	t, err := d.r.selectCluster(ctx, s.Name, p, 0, "")
	st.Message = ""
	switch {
	case err != nil && ctx.Err() != nil:
		d.finishStep(i, runstate.StepCancelled, "", "run cancelled")
		return nil, false
	case err != nil:
		msg, _, _ := describeActivityError(err)
		d.fail(i, msg)
		return nil, false
	}
	d.r.useCluster(t)
	st.Message = t.reason
	return &runstate.WideCluster{Placement: p, Cluster: t.cluster, TaskQueue: t.taskQueue}, true
}

// runWide runs forEach step i over its n items (more than
// spec.WideThreshold) in batch workflows. It owns the step's final state
// like runForEach. items is nil when the list, computed from wide
// outputs, was too large to enter the workflow: the batches evaluate it
// again (BatchInput.ListWide).
func (d *dag) runWide(ctx workflow.Context, i int, env pipeline.Env, items []any, n int) {
	s, st := &d.p.Steps[i], d.steps[i]
	if why := wideUnsupported(s, d.p); why != "" {
		d.fail(i, why)
		return
	}
	placement := s.EffectivePlacement(d.p)
	if placement != nil && workflow.GetVersion(ctx, versionWideKube, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		// Replaying a run from before wide steps on clusters: it failed here.
		d.fail(i, wideKubeRefused())
		return
	}
	params, outputs, wide, why := d.wideEnv(i, env)
	var listWide map[string]runstate.WideRef
	if items == nil {
		// The list stays out of the workflow (startRemoteItems): the
		// batches fetch their items over the wide outputs it reads.
		listWide = d.wideOf(d.itemsReferences()[i])
	}
	if why != "" {
		d.fail(i, why)
		return
	}
	var cluster *runstate.WideCluster
	if placement != nil {
		var ok bool
		if cluster, ok = d.wideCluster(ctx, i, placement); !ok {
			return
		}
	}
	par := s.ForEach.Parallelism
	if par <= 0 {
		par = pipeline.DefaultParallelism
	}
	plan := planWide(n, par)
	now := workflow.Now(ctx)
	st.State, st.StartedAt = runstate.StepRunning, &now
	w := &runstate.WideStatus{Items: n, Batches: len(plan.batches), Parallelism: min(par, plan.childPar*plan.window)}
	st.Wide = w
	d.r.touch()

	policy := s.ForEach.FailurePolicy
	tolerated, stopEarly := policy.Tolerated(n), policy.StopsEarly()
	reuseFrom := ""
	if re := d.in.Reuse.Step(s.Name); re != nil {
		reuseFrom = re.WideFrom
	}
	bare := *s
	literal := pipeline.IsLiteralItems(s.ForEach.Items)
	bare.ForEach = nil
	if !literal {
		bare.ForEach = &pipeline.ForEach{Items: s.ForEach.Items}
	}
	active, failure := 0, ""
	busy := make([]bool, len(plan.slots)) // window slots in use
	stopped := false
	var futures []workflow.ChildWorkflowFuture // by batch; nil once ended
	wait, _ := workflow.NewDisconnectedContext(ctx)
	runFailed := func() bool { return d.failure != "" && !s.RunIf.RunsAfterFailure() }
	stopAll := func() {
		if stopped {
			return
		}
		stopped = true
		for _, f := range futures {
			if f == nil {
				continue
			}
			// Signalling waits for the batch to have started: on a
			// coroutine of its own, since stopAll runs on any of them.
			workflow.Go(wait, func(g workflow.Context) {
				_ = f.SignalChildWorkflow(g, SignalBatchStop, nil).Get(g, nil)
			})
		}
	}
	for k, b := range plan.batches {
		_ = workflow.Await(wait, func() bool { return active < plan.window })
		if stopped || failure != "" || ctx.Err() != nil || runFailed() {
			if runFailed() {
				stopAll()
			}
			break
		}
		slot := slices.Index(busy, false)
		busy[slot] = true
		stopAfter := -1
		if stopEarly {
			stopAfter = max(tolerated-w.Counts.Failed, 0)
		}
		in := BatchInput{
			RunID: d.r.ID(), Project: d.r.Project(), Pipeline: d.in.Pipeline, Step: bare, ItemWhen: s.ForEach.When,
			Params: params, Outputs: outputs, Wide: wide, ListWide: listWide, Start: b[0], End: b[1], Next: b[0], Total: n,
			Parallelism: plan.slots[slot], StopAfter: stopAfter, ReuseFrom: reuseFrom, Cluster: cluster,
		}
		if literal {
			in.Items = items[b[0]:b[1]]
		}
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID: batchID(d.r.ID(), st.Name, k),
			// Cancelling the step cancels the batch and waits for it to
			// cancel its items; a parent that ends any other way (a
			// terminate) still has its batches cancelled.
			WaitForCancellation: true,
			ParentClosePolicy:   enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
			StaticSummary:       fmt.Sprintf("%s items %d–%d", st.Name, b[0], b[1]-1),
		})
		f := workflow.ExecuteChildWorkflow(cctx, ForEachBatchWorkflowName, in)
		futures = append(futures, f)
		active++
		k := k
		workflow.Go(ctx, func(gctx workflow.Context) {
			defer func() { active--; busy[slot] = false; futures[k] = nil; d.r.touch() }()
			var res BatchResult
			gwait, _ := workflow.NewDisconnectedContext(gctx)
			err := f.Get(gwait, &res)
			w.BatchesDone++
			w.Counts.Add(res.Counts)
			w.Failures = mergeFailures(w.Failures, res.Failures)
			switch {
			case err != nil && ctx.Err() == nil && !temporal.IsCanceledError(err):
				if failure == "" {
					failure = fmt.Sprintf("batch of items %d–%d failed: %s", b[0], b[1]-1, stepErrMessage(err))
				}
				stopAll()
			case res.Error != "":
				if failure == "" {
					failure = res.Error
				}
				stopAll()
			case stopEarly && w.Counts.Failed > tolerated:
				stopAll()
			}
		})
	}
	for active > 0 {
		// Another step's failure stops the batches' new items, as it
		// stops a small forEach's.
		_ = workflow.Await(wait, func() bool { return active == 0 || (!stopped && runFailed()) })
		if active > 0 {
			stopAll()
		}
	}

	// Every batch has ended: items neither counted nor in a batch that
	// started never ran.
	counted := w.Counts.Succeeded + w.Counts.Failed + w.Counts.Cancelled + w.Counts.Cached + w.Counts.NotRun + w.Counts.Skipped
	w.Counts.NotRun += n - counted
	never := func(why string) string {
		if w.Counts.NotRun == 0 {
			return why
		}
		return fmt.Sprintf("%s; %d of %d items never ran", why, w.Counts.NotRun, n)
	}
	switch {
	case failure != "":
		d.fail(i, never(failure))
	case w.Counts.Failed > tolerated:
		d.fail(i, never(tooManyFailed(w.Counts.Failed, n, policy, w.Failures)))
	case ctx.Err() != nil:
		d.finishStep(i, runstate.StepCancelled, "", never("run cancelled"))
	case w.Counts.NotRun > 0 || w.Counts.Cancelled > 0:
		d.finishStep(i, runstate.StepCancelled, "", never("stopped: "+d.failure))
	default:
		ref := runstate.WideRef{Run: d.r.ID(), Step: st.Name, Items: n}
		w.Outputs = &ref
		d.outputs[i] = runstate.WideOutputs(ref)
		d.wideRefs[i] = &ref
		var msgs []string
		if w.Counts.Failed > 0 {
			msgs = append(msgs, fmt.Sprintf("%d of %d items failed (tolerated: at most %v%%); their outputs are null", w.Counts.Failed, n, policy.MaxFailedPercent))
		}
		if w.Counts.Skipped > 0 {
			msgs = append(msgs, skippedMessage(w.Counts.Skipped, n, s.ForEach.When))
		}
		d.finishStep(i, runstate.StepSucceeded, "", strings.Join(msgs, "; "))
	}
}

// tooManyFailed is the error of a forEach whose failures exceed what its
// policy tolerates.
func tooManyFailed(failed, n int, p *pipeline.FailurePolicy, first []runstate.ItemFailure) string {
	msg := fmt.Sprintf("%d of %d items failed", failed, n)
	if p.Tolerated(n) > 0 {
		msg = fmt.Sprintf("%d of %d items failed, more than the %v%% tolerated", failed, n, p.MaxFailedPercent)
	}
	if len(first) > 0 {
		msg += fmt.Sprintf("; first: item %d: %s", first[0].Index, first[0].Error)
	}
	return msg
}

// mergeFailures keeps the MaxWideFailures lowest-indexed failures of a and b.
func mergeFailures(a, b []runstate.ItemFailure) []runstate.ItemFailure {
	if len(b) == 0 {
		return a
	}
	out := append(append([]runstate.ItemFailure(nil), a...), b...)
	sort.SliceStable(out, func(x, y int) bool { return out[x].Index < out[y].Index })
	if len(out) > runstate.MaxWideFailures {
		out = out[:runstate.MaxWideFailures]
	}
	return out
}

// wideEnv is what a wide step's batches need of the expression
// environment: the params and the outputs of the steps its templates read,
// within wideEnvBytes (every batch's input carries them), and the wide
// steps its templates read (by reference: the batches have their items
// rendered by activities.RenderItemsName).
func (d *dag) wideEnv(i int, env pipeline.Env) (map[string]any, map[string]pipeline.StepEnv, map[string]runstate.WideRef, string) {
	outputs := map[string]pipeline.StepEnv{}
	var wide map[string]runstate.WideRef
	for _, j := range d.refs[i] {
		name := d.nameOf(j)
		if ref := d.wideRefs[j]; ref != nil {
			if !d.wideTemplates() {
				return nil, nil, nil, fmt.Sprintf("the templates of a forEach over more than %d items cannot read the outputs of wide step %q yet", pipeline.WideThreshold, name)
			}
			// A list computed from wide outputs is literal by now
			// (startRemoteItems): only the templates need the ref.
			if slices.Contains(d.workReferences()[i], j) {
				if wide == nil {
					wide = map[string]runstate.WideRef{}
				}
				wide[name] = *ref
			}
			continue
		}
		if se, ok := env.Steps[name]; ok {
			outputs[name] = se
		}
	}
	b, err := json.Marshal(struct {
		P map[string]any
		O map[string]pipeline.StepEnv
		W map[string]runstate.WideRef
	}{env.Params, outputs, wide})
	if err != nil {
		return nil, nil, nil, fmt.Sprintf("encoding the params and outputs the step reads: %v", err)
	}
	if len(b) > wideEnvBytes {
		return nil, nil, nil, fmt.Sprintf("the params and outputs a forEach over more than %d items reads are %d KiB; the limit is %d KiB (every batch carries them)", pipeline.WideThreshold, len(b)>>10, wideEnvBytes>>10)
	}
	return env.Params, outputs, wide, ""
}

// readsWide reports whether step i reads the outputs of a wide step.
func (d *dag) readsWide(i int) bool {
	for _, j := range d.refs[i] {
		if d.wideRefs[j] != nil {
			return true
		}
	}
	return false
}

// What renderRemote asks for.
type renderMode int

const (
	renderTemplates renderMode = iota // when, then the step's templates
	renderList                        // when, then the forEach list
	renderWhen                        // when alone
)

// renderRemote renders step i, whose when or templates read the outputs of
// wide steps, in an activity that loads them from Postgres; the workflow
// records only the rendered step (bounded by spec.MaxRenderedStep).
func (d *dag) renderRemote(ctx workflow.Context, i int, env pipeline.Env, mode renderMode) (activities.RenderResult, error) {
	req := activities.RenderRequest{Step: d.p.Steps[i], Params: env.Params, Outputs: map[string]any{}, Wide: map[string]runstate.WideRef{}, Run: env.Run,
		Items: mode == renderList, ItemsByRef: mode == renderList, WhenOnly: mode == renderWhen}
	for _, j := range d.refs[i] {
		name := d.nameOf(j)
		if ref := d.wideRefs[j]; ref != nil {
			if mode != renderWhen || slices.Contains(d.whenReferences()[i], j) {
				req.Wide[name] = *ref
			}
		} else if se, ok := env.Steps[name]; ok {
			req.Outputs[name] = se.Outputs
		}
	}
	actx := workflow.WithActivityOptions(ctx, renderActivityOptions(d.r.controlQueue("")))
	var res activities.RenderResult
	err := workflow.ExecuteActivity(actx, activities.RenderStepName, req).Get(actx, &res)
	return res, err
}

// startRemote runs step i whose templates read wide outputs: render in an
// activity, then run what it rendered like any step.
func (d *dag) startRemote(i int, env pipeline.Env, opts []StepOption) {
	s, st := &d.p.Steps[i], d.steps[i]
	if kindOf(*s) == pipeline.KindApproval && !d.wideTemplates() {
		d.fail(i, fmt.Sprintf("an approval step cannot read the outputs of a forEach over more than %d items yet", pipeline.WideThreshold))
		return
	}
	if s.ForEach != nil {
		d.startRemoteItems(i, env, opts)
		return
	}
	d.running++
	workflow.Go(d.ctx, func(gctx workflow.Context) {
		defer func() { d.running--; d.done[i] = true; d.r.touch() }()
		now := workflow.Now(gctx)
		st.State, st.StartedAt, st.Message = runstate.StepRunning, &now, "rendering templates over wide outputs"
		d.r.touch()
		res, err := d.renderRemote(gctx, i, env, renderTemplates)
		st.Message = ""
		if !d.rendered(gctx, i, res, err) {
			return
		}
		if kindOf(*s) == pipeline.KindApproval {
			out, err := d.r.runApproval(gctx, st, res.Approval, s.Timeout.D(), d.stopWaiting(s))
			d.record(i, out, err)
			return
		}
		if kindOf(*s) == pipeline.KindPromote && res.Promote != nil {
			out, err := d.r.runPromote(gctx, st, res.Promote)
			d.record(i, out, err)
			return
		}
		w := stepWork{kind: kindOf(*s), container: res.Container, ray: res.Ray, spark: res.Spark, inference: res.Inference, pipeline: res.Pipeline}
		w.gpus, w.gpuType = s.GPURequest()
		out, err := d.r.runWork(gctx, st, s.Name, nil, w, opts...)
		d.record(i, out, err)
	})
}

// startRemoteItems runs forEach step i whose list (or when) reads the
// outputs of wide steps: an activity evaluates the list (at most
// MaxRenderedItems of JSON), which then stands in the step as a literal
// list, and the step runs as any forEach (wide again past
// spec.WideThreshold items). A forEach whose when or templates read wide
// outputs goes through startRemoteTemplates instead.
func (d *dag) startRemoteItems(i int, env pipeline.Env, opts []StepOption) {
	s, st := &d.p.Steps[i], d.steps[i]
	if d.templatesReadWide(i) {
		if !d.wideTemplates() {
			d.fail(i, fmt.Sprintf("the templates of a forEach step cannot read the outputs of a forEach over more than %d items yet (its items can)", pipeline.WideThreshold))
			return
		}
		d.startRemoteTemplates(i, env, opts)
		return
	}
	d.running++
	workflow.Go(d.ctx, func(gctx workflow.Context) {
		defer func() { d.running--; d.done[i] = true; d.r.touch() }()
		st.Message = "evaluating forEach items over wide outputs"
		d.r.touch()
		res, err := d.renderRemote(gctx, i, env, renderList)
		st.Message = ""
		if !d.rendered(gctx, i, res, err) {
			return
		}
		if res.Count > 0 {
			d.runWideByRef(gctx, i, env, res.Count)
			return
		}
		fe := *s.ForEach
		fe.Items = res.Items
		s.ForEach = &fe
		d.runForEach(gctx, i, env, opts)
	})
}

// runWideByRef runs forEach step i whose list, computed from wide outputs,
// has n items (more than spec.WideThreshold) and was too large to enter
// the workflow (RenderRequest.ItemsByRef): the batches evaluate it again
// over the outputs, each fetching its own items. No run from before this
// path can reach it: their render activity failed instead of answering
// Count, and replay follows the recorded result.
func (d *dag) runWideByRef(ctx workflow.Context, i int, env pipeline.Env, n int) {
	d.runWide(ctx, i, env, nil, n)
}

// wideOf returns the WideRefs, by step name, of the wide steps among refs.
func (d *dag) wideOf(refs []int) map[string]runstate.WideRef {
	var out map[string]runstate.WideRef
	for _, j := range refs {
		if ref := d.wideRefs[j]; ref != nil {
			if out == nil {
				out = map[string]runstate.WideRef{}
			}
			out[d.nameOf(j)] = *ref
		}
	}
	return out
}

// templatesReadWide reports whether step i's when or templates (not its
// forEach list) read a wide step's outputs.
func (d *dag) templatesReadWide(i int) bool {
	if d.tmplRefs == nil {
		d.tmplRefs = d.references(pipeline.RefWhen | pipeline.RefTemplates)
	}
	for _, j := range d.tmplRefs[i] {
		if d.wideRefs[j] != nil {
			return true
		}
	}
	return false
}
