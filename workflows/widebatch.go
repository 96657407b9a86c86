package workflows

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Bounds of one batch workflow run (see ForEachBatchWorkflow).
const (
	// batchEventBudget is the history length at which a batch stops
	// starting items and continues as new: far under Temporal's 51,200,
	// whatever the items' retries cost (an item that retries 20 times
	// adds about 170 events; the items in flight finish before the
	// continue-as-new).
	batchEventBudget = 10_000
	// flushRows and flushBytes bound one RecordItems write; flushDelay is
	// how long a finished item may wait for others to share its write.
	flushRows  = 200
	flushBytes = 256 << 10
	flushDelay = 2 * time.Second
	// maxFailureItemBytes: a failed item's value is shown in the run
	// status only when this small.
	maxFailureItemBytes = 1 << 10
)

// batchItemsPerRun, when positive, also continues a batch as new after
// that many items started in one run: tests use it to exercise
// continue-as-new without 10,000-event histories (export_test.go).
var batchItemsPerRun = 0

// ForEachBatchWorkflow runs one batch of a wide forEach step (wide.go):
// items [Start, Start+len(Items)) of the step, Parallelism at a time, each
// with the step's retries and timeout exactly as an item of a small forEach
// runs (Run.runWork), writing finished items to Postgres in batches
// (activities.RecordItemsName) and returning only counts. It stops starting items
// when its failures pass StopAfter, on SignalBatchStop, or when cancelled
// (its items are then cancelled too); it continues as new, once its items
// in flight have finished, when its history reaches batchEventBudget.
// Registered as ForEachBatchWorkflowName; deterministic.
func ForEachBatchWorkflow(ctx workflow.Context, in BatchInput) (BatchResult, error) {
	info := workflow.GetInfo(ctx)
	r := &Run{root: ctx, stepCtx: ctx, taskQueue: info.TaskQueueName, controlQueues: true}
	r.status = runstate.Status{RunID: in.RunID, Project: in.Project, Pipeline: in.Pipeline, Workflow: info.WorkflowType.Name, State: runstate.Running}
	b := &batch{r: r, in: &in, res: in.Result}
	return b.run(ctx)
}

// batch is the state of one ForEachBatchWorkflow run.
type batch struct {
	r   *Run
	in  *BatchInput
	res BatchResult

	active  int
	stopped bool
	failed  int // failures of this run of the batch (vs StopAfter)

	base pipeline.Env // the items' environment, item aside (env)
	// rend renders the items when the step's templates read wide outputs
	// (in.Wide); nil: they are rendered here.
	rend *itemRenderer

	buf      []runstate.ItemRecord
	bufBytes int
	flushing bool
	done     bool // no more items will finish
}

func (b *batch) run(ctx workflow.Context) (BatchResult, error) {
	in := b.in
	end := in.End
	if err := b.loadItems(ctx); err != nil {
		b.res.Error = err.Error()
		return b.res, nil
	}
	b.stopped = in.Stopped
	stop := workflow.GetSignalChannel(ctx, SignalBatchStop)
	workflow.Go(ctx, func(gctx workflow.Context) {
		for stop.Receive(gctx, nil) {
			b.stopped = true
		}
	})
	// Writes must land even when the batch is cancelled.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	flushed := b.startFlusher(dctx)

	if in.ReuseFrom != "" && !in.ReuseDone {
		if err := b.reuse(dctx); err != nil {
			return b.res, err
		}
	}
	reused := in.Reused
	opts := batchStepOptions(in)
	if len(in.Wide) > 0 {
		b.rend = b.renderer()
	}
	next, more, started := in.Next, false, 0
	for ; next < end; next++ {
		_ = workflow.Await(ctx, func() bool { return b.active < in.Parallelism })
		if ctx.Err() != nil || b.stopped || (in.StopAfter >= 0 && b.failed > in.StopAfter) {
			break
		}
		// Every run starts at least one item, so a batch always moves on.
		info := workflow.GetInfo(ctx)
		if started > 0 && (info.GetCurrentHistoryLength() >= batchEventBudget || info.GetContinueAsNewSuggested() ||
			(batchItemsPerRun > 0 && started >= batchItemsPerRun)) {
			more = true
			break
		}
		for len(reused) > 0 && reused[0] < next {
			reused = reused[1:]
		}
		if len(reused) > 0 && reused[0] == next {
			continue // taken from the retried run (counted by reuse)
		}
		k := next
		var pre *activities.RenderedItem
		if b.rend != nil {
			it, err := b.rend.render(ctx, k)
			if err != nil {
				if ctx.Err() == nil && b.res.Error == "" {
					msg, _, _ := describeActivityError(err)
					b.res.Error = fmt.Sprintf("rendering the templates of items %d–%d over wide outputs: %s", k, end-1, msg)
				}
				break
			}
			pre = &it
		}
		started++
		b.active++
		workflow.Go(ctx, func(gctx workflow.Context) {
			defer func() { b.active-- }()
			b.runItem(gctx, k, pre, opts)
		})
	}
	_ = workflow.Await(dctx, func() bool { return b.active == 0 })
	b.done = true
	_ = workflow.Await(dctx, func() bool { return flushed.IsReady() })
	if err := flushed.Get(dctx, nil); err != nil {
		b.res.Error = fmt.Sprintf("recording item states in Postgres failed: %v", err)
		return b.res, nil
	}
	if more && ctx.Err() == nil && !b.stopped && b.res.Error == "" {
		nin := *in
		if in.Step.ForEach == nil { // a literal list's slice travels
			nin.Items = in.Items[next-in.Start:]
		} else {
			nin.Items = nil
		}
		nin.Start, nin.Next = next, next
		nin.Reused = reused
		nin.ReuseDone = true
		if in.StopAfter >= 0 {
			nin.StopAfter = max(in.StopAfter-b.failed, 0)
		}
		nin.Result = b.res
		return BatchResult{}, workflow.NewContinueAsNewError(ctx, ForEachBatchWorkflowName, nin)
	}
	return b.res, nil
}

// batchStepOptions are an item's retries and timeout, and the cluster the
// pipeline workflow chose for its Job (none: the local runtime). Never a
// selection per item, nor a sweep when the batch ends (onCluster). Never
// WithMetrics: an item's record keeps no metrics (a wide forEach's items
// report none), so its Job need not run under the launcher for them.
func batchStepOptions(in *BatchInput) []StepOption {
	s := &in.Step
	var opts []StepOption
	if s.Timeout > 0 {
		opts = append(opts, WithTimeout(s.Timeout.D()))
	}
	if s.Retries != nil {
		opts = append(opts, WithRetries(*s.Retries))
	}
	if c := in.Cluster; c != nil {
		opts = append(opts, onCluster(c.Placement, kubeTarget{cluster: c.Cluster, taskQueue: c.TaskQueue}))
	}
	return opts
}

// env is the expression environment of the batch's items (item aside).
func (b *batch) env() pipeline.Env {
	if b.base.Run.ID != "" {
		return b.base
	}
	in := b.in
	env := pipeline.Env{Params: in.Params, Steps: in.Outputs, Run: pipeline.RunEnv{ID: in.RunID, Project: in.Project, Pipeline: in.Pipeline}}
	b.base = env
	return env
}

// loadItems makes in.Items the batch's items [Start, End): an expression
// list is evaluated again (see BatchInput), by activities.RenderItemsName when it
// reads wide outputs, and must be as long as the pipeline workflow found
// it.
func (b *batch) loadItems(ctx workflow.Context) error {
	in := b.in
	if len(in.ListWide) > 0 {
		return b.fetchItems(ctx)
	}
	if in.Step.ForEach == nil {
		if len(in.Items) != in.End-in.Start {
			return fmt.Errorf("batch of items %d–%d got %d items", in.Start, in.End-1, len(in.Items))
		}
		return nil
	}
	all, err := pipeline.EvalItems(in.Step.ForEach, b.env())
	if err != nil {
		return fmt.Errorf("evaluating forEach items in the batch: %v", err)
	}
	if len(all) != in.Total {
		return fmt.Errorf("the batch evaluated %d forEach items, the pipeline %d", len(all), in.Total)
	}
	in.Items = all[in.Start:in.End]
	return nil
}

// fetchItems makes in.Items the batch's items of a list that reads wide
// outputs (in.ListWide), a chunk of values per activities.RenderItemsName call (the
// activity evaluates the list over the outputs and returns up to
// renderItemsBytes of it): the items enter the batch's history, as its
// records carry them anyway, never the pipeline's.
func (b *batch) fetchItems(ctx workflow.Context) error {
	in := b.in
	req := activities.RenderItemsRequest{
		Step:   pipeline.Step{Name: in.Step.Name, ForEach: &pipeline.ForEach{Items: in.Step.ForEach.Items}},
		Params: in.Params, Outputs: in.Outputs, Wide: in.ListWide, Run: b.env().Run,
		End: in.End, Total: in.Total, ValuesOnly: true,
	}
	actx := workflow.WithActivityOptions(ctx, renderActivityOptions(b.r.controlQueue("")))
	items := make([]any, 0, in.End-in.Start)
	for from := in.Start; from < in.End; {
		req.From = from
		var res activities.RenderItemsResult
		if err := workflow.ExecuteActivity(actx, activities.RenderItemsName, req).Get(actx, &res); err != nil {
			msg, _, _ := describeActivityError(err)
			return fmt.Errorf("evaluating forEach items %d–%d over wide outputs: %s", from, in.End-1, msg)
		}
		if len(res.Values) == 0 || from+len(res.Values) > in.End {
			return fmt.Errorf("evaluating forEach items from %d: got %d items", from, len(res.Values))
		}
		items = append(items, res.Values...)
		from += len(res.Values)
	}
	in.Items = items
	return nil
}

// renderer is the batch's itemRenderer (in.Wide set): the same step,
// environment and list the batch has, its range [Start, End). A list
// fetched by fetchItems travels as values, as a literal one does: the
// renderer is not given the wide steps it reads.
func (b *batch) renderer() *itemRenderer {
	in := b.in
	r := &itemRenderer{queue: b.r.controlQueue("")}
	r.req = activities.RenderItemsRequest{Params: in.Params, Outputs: in.Outputs, Wide: in.Wide, Run: b.env().Run, End: in.End, Total: in.Total, ItemWhen: in.ItemWhen}
	step := in.Step
	if len(in.ListWide) > 0 {
		step.ForEach = nil
	}
	r.setStep(step, in.Items, in.Start)
	return r
}

// runItem runs item k and queues its record; pre is its work rendered by
// activities.RenderItemsName (nil: render it here).
func (b *batch) runItem(ctx workflow.Context, k int, pre *activities.RenderedItem, opts []StepOption) {
	in := b.in
	item := in.Items[k-in.Start]
	st := &runstate.StepStatus{Name: fmt.Sprintf("%s[%d]", in.Step.Name, k), Kind: string(kindOf(in.Step)), State: runstate.StepPending}
	var w stepWork
	var skip string
	var err error
	if pre != nil {
		w, skip, err = itemWork(*pre, &in.Step)
	} else {
		env := b.env()
		env.Item, env.HasItem = item, true
		w, skip, err = renderItem(&in.Step, in.ItemWhen, env)
	}
	switch {
	case err != nil:
		now := workflow.Now(ctx)
		st.StartedAt = &now
		b.r.endStep(st, runstate.StepFailed, fmt.Sprintf("rendering templates: %v", err), "")
	case skip != "":
		b.r.endStep(st, runstate.StepSkipped, "", skip)
	default:
		_, _ = b.r.runWork(ctx, st, in.Step.Name, &k, w, opts...)
	}
	b.finished(k, item, st)
}

// finished counts item k and queues its record for the flusher.
func (b *batch) finished(k int, item any, st *runstate.StepStatus) {
	if !st.State.Terminal() {
		st.State = runstate.StepCancelled
	}
	b.res.Counts.Count(st.State)
	if st.State == runstate.StepFailed {
		b.failed++
		f := runstate.ItemFailure{Index: k, Error: st.Error}
		if ib, err := json.Marshal(item); err == nil && len(ib) <= maxFailureItemBytes {
			f.Item = item
		}
		b.res.Failures = mergeFailures(b.res.Failures, []runstate.ItemFailure{f})
	}
	rec := runstate.ItemRecord{Index: k, State: st.State, Item: item, Attempts: st.Attempts, Error: st.Error, Message: st.Message}
	if st.State == runstate.StepSucceeded && st.Outputs != nil {
		rec.Outputs = st.Outputs
	}
	if st.State == runstate.StepSucceeded || st.State == runstate.StepCached {
		// References (the bytes are in the store); a cache hit's are its
		// source's, which a fan-in of the step reads all the same.
		rec.Artifacts = st.Artifacts
	}
	if st.StartedAt != nil {
		rec.StartedAt = *st.StartedAt
	}
	if st.FinishedAt != nil {
		rec.FinishedAt = *st.FinishedAt
	} else {
		rec.FinishedAt = workflow.Now(b.r.root)
	}
	if rec.StartedAt.IsZero() {
		rec.StartedAt = rec.FinishedAt
	}
	size := 256
	if ob, err := json.Marshal(rec.Outputs); err == nil {
		size += len(ob)
	}
	if ib, err := json.Marshal(item); err == nil {
		size += len(ib)
	}
	// Artifacts are not counted: when a write goes is part of the
	// history, and batches recorded before items kept their artifacts
	// must flush at the same points when replayed. Their references are
	// small (a few hundred bytes each, as many as the step declares), so
	// 200 items' stay far under Temporal's 2 MB payload limit.
	b.buf = append(b.buf, rec)
	b.bufBytes += size
}

// startFlusher writes queued records with at most one write in flight: as
// soon as flushRows or flushBytes are queued, else flushDelay after the
// first, and everything once no item will finish any more. The future is
// ready when all is written (or a write failed for good).
func (b *batch) startFlusher(ctx workflow.Context) workflow.Future {
	f, set := workflow.NewFuture(ctx)
	opts := workflow.ActivityOptions{
		TaskQueue:           b.r.controlQueue(""),
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 500 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 20,
		},
	}
	full := func() bool { return len(b.buf) >= flushRows || b.bufBytes >= flushBytes || b.done }
	workflow.Go(ctx, func(gctx workflow.Context) {
		actx := workflow.WithActivityOptions(gctx, opts)
		for {
			_ = workflow.Await(gctx, func() bool { return len(b.buf) > 0 || b.done })
			if len(b.buf) == 0 {
				set.Set(nil, nil)
				return
			}
			if !full() {
				_, _ = workflow.AwaitWithTimeout(gctx, flushDelay, full)
			}
			recs := b.buf
			b.buf, b.bufBytes = nil, 0
			req := activities.RecordItemsRequest{Project: b.in.Project, RunID: b.in.RunID, Step: b.in.Step.Name, Items: recs}
			if err := workflow.ExecuteActivity(actx, activities.RecordItemsName, req).Get(gctx, nil); err != nil {
				set.Set(nil, err)
				return
			}
		}
	})
	return f
}

// reuse takes, on a retry, the items of this batch that succeeded in the
// retried run (activities.ReuseItemsName), and counts them CACHED.
func (b *batch) reuse(ctx workflow.Context) error {
	in := b.in
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           b.r.controlQueue(""),
		StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 500 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 20,
		},
	})
	var res activities.ReuseItemsResult
	req := activities.ReuseItemsRequest{RunID: in.RunID, OldRun: in.ReuseFrom, Step: in.Step.Name, Start: in.Start, Items: in.Items}
	if err := workflow.ExecuteActivity(actx, activities.ReuseItemsName, req).Get(ctx, &res); err != nil {
		return fmt.Errorf("reusing items of run %s: %w", in.ReuseFrom, err)
	}
	sort.Ints(res.Indexes)
	in.Reused, in.ReuseDone = res.Indexes, true
	b.res.Counts.Cached += len(res.Indexes)
	return nil
}
