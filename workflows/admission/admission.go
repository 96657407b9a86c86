package admission

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
)

// Tunables of the admission workflow (variables so tests can shorten them).
var (
	// Refresh is how often a cluster's inventory and the policies
	// are re-read while workloads wait (also the aging tick).
	Refresh = 10 * time.Second
	// HistoryLimit is the history length after which the workflow
	// continues as new, carrying its queue.
	HistoryLimit = 10_000
)

// admission is the workflow's state.
type admission struct {
	cluster   string
	pending   []activities.QueuedWorkload
	running   []activities.QueuedWorkload
	snap      activities.AdmissionSnapshot
	loadedAt  time.Time
	decidedAt *time.Time
	waits     map[string]gpu.Wait // last decision, by workload ID

	inflight int              // signals to runs not acknowledged yet
	outbox   []outgoing       // signals waiting for an in-flight slot
	gone     []string         // workloads of runs that could not be signalled
	wake     workflow.Channel // a run was found gone, or a slot freed

	// metrics counts submissions, admissions and preemptions once each
	// (the handler emits nothing on replay) and shows the queue's length.
	metrics client.MetricsHandler
}

// gauges publishes the queue's length and the running workloads.
func (a *admission) gauges() {
	a.metrics.Gauge(telemetry.MetricGPUQueueLength).Update(float64(len(a.pending)))
	a.metrics.Gauge(telemetry.MetricGPUWorkloadsRunning).Update(float64(len(a.running)))
}

// outgoing is a signal to a run.
type outgoing struct {
	run, name string
	arg       any
	// release names the workloads to free if the run cannot be signalled
	// (none for a mere wait reason).
	release []string
}

// answers collects one decision round's answers to runs: a grouped
// workload's go into its run's one SignalGPUUpdates, sent after the round;
// the others are queued at once, a signal each, as runs recorded before
// grouping expect (and in the same order, so their histories replay).
type answers struct {
	a       *admission
	updates map[string]*activities.GPUUpdates
	release map[string][]string
	order   []string // runs, in the order first told
}

func (t *answers) group(run string) *activities.GPUUpdates {
	u := t.updates[run]
	if u == nil {
		u = &activities.GPUUpdates{}
		t.updates[run] = u
		t.order = append(t.order, run)
	}
	return u
}

func (t *answers) admitted(q activities.QueuedWorkload, m activities.GPUAdmitted) {
	if !q.Grouped {
		t.a.outbox = append(t.a.outbox, outgoing{run: q.Run, name: activities.SignalGPUAdmitted, release: []string{m.Workload}, arg: m})
		return
	}
	u := t.group(q.Run)
	u.Admitted = append(u.Admitted, m)
	t.release[q.Run] = append(t.release[q.Run], m.Workload)
}

func (t *answers) preempt(q activities.QueuedWorkload, m activities.GPUPreempt) {
	if !q.Grouped {
		// A run that is gone frees its workload.
		t.a.outbox = append(t.a.outbox, outgoing{run: q.Run, name: activities.SignalGPUPreempt, release: []string{m.Workload}, arg: m})
		return
	}
	u := t.group(q.Run)
	u.Preempt = append(u.Preempt, m)
	t.release[q.Run] = append(t.release[q.Run], m.Workload)
}

func (t *answers) waiting(q activities.QueuedWorkload, m activities.GPUWaiting) {
	if !q.Grouped {
		t.a.outbox = append(t.a.outbox, outgoing{run: q.Run, name: activities.SignalGPUWaiting, arg: m})
		return
	}
	u := t.group(q.Run)
	u.Waiting = append(u.Waiting, m)
}

// send queues one SignalGPUUpdates per run told something grouped.
func (t *answers) send() {
	for _, run := range t.order {
		t.a.outbox = append(t.a.outbox, outgoing{run: run, name: activities.SignalGPUUpdates, arg: *t.updates[run], release: t.release[run]})
	}
}

// MaxPendingSignals bounds the admission workflow's signals in flight:
// Temporal fails a workflow task that leaves more than 2,000 external
// signals pending (limit.numPendingSignals), and a burst of admissions
// would otherwise exceed it.
var MaxPendingSignals = 500

// Workflow owns one cluster's GPU queue. See package gpu for the
// rules it decides by.
func Workflow(ctx workflow.Context, in activities.AdmissionInput) error {
	a := &admission{cluster: in.Cluster, pending: in.Pending, running: in.Running, waits: map[string]gpu.Wait{},
		wake:    workflow.NewBufferedChannel(ctx, 1),
		metrics: workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"cluster": in.Cluster})}
	if err := workflow.SetQueryHandler(ctx, activities.QueryAdmissionQueue, func() (activities.AdmissionQueue, error) {
		return a.queue(), nil
	}); err != nil {
		return fmt.Errorf("register queue query: %w", err)
	}
	reqs := workflow.GetSignalChannel(ctx, activities.SignalAdmissionRequest)
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	logger := workflow.GetLogger(ctx)
	for {
		for {
			var req activities.AdmissionRequest
			if !reqs.ReceiveAsync(&req) {
				break
			}
			a.apply(workflow.Now(ctx), req)
		}
		for a.wake.ReceiveAsync(nil) {
		}
		a.flush(ctx)
		for _, id := range a.gone {
			a.apply(workflow.Now(ctx), activities.AdmissionRequest{Op: activities.AdmissionRelease, Workload: gpu.Workload{ID: id}})
		}
		a.gone = a.gone[:0]
		if len(a.pending) > 0 {
			now := workflow.Now(ctx)
			if a.loadedAt.IsZero() || now.Sub(a.loadedAt) >= Refresh {
				var snap activities.AdmissionSnapshot
				req := activities.AdmissionSnapshotRequest{Cluster: a.cluster, Runs: a.runningRuns()}
				if err := workflow.ExecuteLocalActivity(lctx, activities.LoadAdmissionSnapshotName, req).Get(ctx, &snap); err != nil {
					// Decide on the last snapshot; the next tick tries again.
					logger.Warn("cannot load the admission snapshot", "cluster", a.cluster, "error", err)
				} else {
					a.snap = snap
					a.releaseEnded(now, snap.EndedRuns)
				}
				a.loadedAt = now
			}
			a.decide(ctx, workflow.Now(ctx))
		}
		if workflow.GetInfo(ctx).GetCurrentHistoryLength() > HistoryLimit && reqs.Len() == 0 {
			// Every signal must be sent and acknowledged first: a run
			// found gone must not keep its GPUs in the next run's queue.
			if err := workflow.Await(ctx, func() bool { return a.inflight == 0 || len(a.gone) > 0 }); err != nil {
				return err
			}
			if a.inflight == 0 && len(a.outbox) == 0 && len(a.gone) == 0 && reqs.Len() == 0 {
				return workflow.NewContinueAsNewError(ctx, activities.AdmissionWorkflowName, activities.AdmissionInput{Cluster: a.cluster, Pending: a.pending, Running: a.running})
			}
			continue
		}
		a.gauges()
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(reqs, func(c workflow.ReceiveChannel, _ bool) {
			var req activities.AdmissionRequest
			c.Receive(ctx, &req)
			a.apply(workflow.Now(ctx), req)
		})
		sel.AddReceive(a.wake, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
		if len(a.pending) > 0 {
			// Aging and inventory changes need time to pass, not a signal.
			tctx, cancel := workflow.WithCancel(ctx)
			sel.AddFuture(workflow.NewTimer(tctx, Refresh), func(workflow.Future) {})
			sel.Select(ctx)
			cancel()
			continue
		}
		sel.Select(ctx)
	}
}

// apply records a submit or a release, or each of a batch's.
func (a *admission) apply(now time.Time, req activities.AdmissionRequest) {
	if req.Op == activities.AdmissionBatch {
		for _, r := range req.Requests {
			if r.Op != activities.AdmissionBatch { // batches do not nest
				a.applyOne(now, r, true)
			}
		}
		return
	}
	a.applyOne(now, req, false)
}

// applyOne records a submit or a release. A grouped submit came in a
// batch: its run takes its answers in SignalGPUUpdates.
func (a *admission) applyOne(now time.Time, req activities.AdmissionRequest, grouped bool) {
	id := req.Workload.ID
	switch req.Op {
	case activities.AdmissionSubmit:
		if a.find(id) {
			return // a retried submit: already queued or admitted
		}
		w := req.Workload
		if w.Submitted.IsZero() {
			w.Submitted = now
		}
		a.pending = append(a.pending, activities.QueuedWorkload{Workload: w, Run: req.Run, Step: req.Step, Grouped: grouped})
		a.metrics.Counter(telemetry.MetricGPUWorkloadsSubmitted).Inc(1)
	case activities.AdmissionRelease:
		a.pending = slices.DeleteFunc(a.pending, func(q activities.QueuedWorkload) bool { return q.Workload.ID == id })
		a.running = slices.DeleteFunc(a.running, func(q activities.QueuedWorkload) bool { return q.Workload.ID == id })
		delete(a.waits, id)
	}
}

// runningRuns lists the runs holding admitted workloads, each once.
func (a *admission) runningRuns() []string {
	var out []string
	seen := make(map[string]bool, len(a.running))
	for _, q := range a.running {
		if !seen[q.Run] {
			seen[q.Run] = true
			out = append(out, q.Run)
		}
	}
	return out
}

// releaseEnded frees what runs that ended without giving it back still
// hold (a run terminated through Temporal runs no cleanup).
func (a *admission) releaseEnded(now time.Time, runs []string) {
	for _, run := range runs {
		for _, q := range slices.Clone(a.running) {
			if q.Run == run {
				a.apply(now, activities.AdmissionRequest{Op: activities.AdmissionRelease, Workload: gpu.Workload{ID: q.Workload.ID}})
			}
		}
	}
}

func (a *admission) find(id string) bool {
	for _, q := range a.pending {
		if q.Workload.ID == id {
			return true
		}
	}
	for _, q := range a.running {
		if q.Workload.ID == id {
			return true
		}
	}
	return false
}

// decide runs one scheduling cycle and tells the runs what changed for
// them: admitted, or a new reason to wait.
func (a *admission) decide(ctx workflow.Context, now time.Time) {
	snap := gpu.Snapshot{Now: now, Inventory: a.snap.Inventory, Policy: a.snap.Policy}
	for _, q := range a.running {
		snap.Running = append(snap.Running, gpu.Running{Workload: q.Workload, Admitted: *q.Admitted, Placement: q.Placement})
	}
	for _, q := range a.pending {
		snap.Pending = append(snap.Pending, q.Workload)
	}
	plan := gpu.Schedule(snap)
	a.decidedAt = &now

	admitted := map[string]gpu.Admission{}
	for _, ad := range plan.Admissions {
		admitted[ad.Workload] = ad
	}
	a.waits = make(map[string]gpu.Wait, len(plan.Waits))
	for _, w := range plan.Waits {
		a.waits[w.Workload] = w
	}
	tell := &answers{a: a, updates: map[string]*activities.GPUUpdates{}, release: map[string][]string{}}
	for _, p := range plan.Preemptions {
		for i := range a.running {
			q := &a.running[i]
			if q.Workload.ID != p.Victim || q.Preempting {
				continue
			}
			q.Preempting = true
			a.metrics.WithTags(map[string]string{"reason": string(p.Reason)}).Counter(telemetry.MetricGPUWorkloadsPreempted).Inc(1)
			tell.preempt(*q, activities.GPUPreempt{Workload: p.Victim, Reason: string(p.Reason), For: p.For})

		}
	}
	keep := a.pending[:0]
	for _, q := range a.pending {
		if ad, ok := admitted[q.Workload.ID]; ok {
			at := now
			q.Admitted, q.Placement, q.WaitKey = &at, ad.Placement, ""
			a.running = append(a.running, q)
			a.metrics.Counter(telemetry.MetricGPUWorkloadsAdmitted).Inc(1)
			tell.admitted(q, activities.GPUAdmitted{Workload: q.Workload.ID, Nodes: nodesOf(ad.Placement), Borrowed: len(ad.Borrowed) > 0})
			continue
		}
		if w, ok := a.waits[q.Workload.ID]; ok {
			// Tell the run only when the reason changes, not every time
			// its position does: each signal is history on both sides.
			if key := string(w.Reason) + "|" + string(w.Resource) + "|" + w.BlockedBy; key != q.WaitKey {
				q.WaitKey = key
				tell.waiting(q, activities.GPUWaiting{Workload: q.Workload.ID, Message: w.Message()})
			}
		}
		keep = append(keep, q)
	}
	a.pending = keep
	tell.send()
	a.flush(ctx)
}

// flush sends queued signals while fewer than MaxPendingSignals are in
// flight. Acknowledgements are awaited off the loop, so that the next
// submissions are decided while the signals travel.
func (a *admission) flush(ctx workflow.Context) {
	for len(a.outbox) > 0 && a.inflight < MaxPendingSignals {
		o := a.outbox[0]
		a.outbox = a.outbox[1:]
		f := workflow.SignalExternalWorkflow(ctx, o.run, "", o.name, o.arg)
		a.inflight++
		workflow.Go(ctx, func(gctx workflow.Context) {
			err := f.Get(gctx, nil)
			a.inflight--
			if err != nil && len(o.release) > 0 {
				// The run is gone (ended, terminated): what it held or
				// was given is free again.
				workflow.GetLogger(gctx).Warn("cannot signal a run; releasing its workloads", "run", o.run, "workloads", len(o.release), "error", err)
				a.gone = append(a.gone, o.release...)
			}
			if err != nil || len(a.outbox) > 0 {
				a.wake.SendAsync(true) // one pending wake is enough
			}
		})
	}
}

func nodesOf(p []gpu.Assignment) []string {
	var out []string
	for _, as := range p {
		if !slices.Contains(out, as.Node) {
			out = append(out, as.Node)
		}
	}
	slices.Sort(out)
	return out
}

// queue renders the query answer.
func (a *admission) queue() activities.AdmissionQueue {
	out := activities.AdmissionQueue{Cluster: a.cluster, DecidedAt: a.decidedAt, Pending: []activities.QueueEntry{}, Running: []activities.QueueEntry{}}
	for _, q := range a.pending {
		e := entryOf(q)
		if w, ok := a.waits[q.Workload.ID]; ok {
			e.Position, e.Priority, e.Reason, e.Message = w.Position, w.Priority, string(w.Reason), w.Message()
		}
		out.Pending = append(out.Pending, e)
	}
	slices.SortStableFunc(out.Pending, func(x, y activities.QueueEntry) int {
		switch {
		case x.Position == 0 && y.Position != 0:
			return 1 // not decided yet: last
		case y.Position == 0 && x.Position != 0:
			return -1
		}
		return x.Position - y.Position
	})
	for _, q := range a.running {
		e := entryOf(q)
		e.Admitted, e.Nodes = q.Admitted, nodesOf(q.Placement)
		out.Running = append(out.Running, e)
	}
	return out
}

func entryOf(q activities.QueuedWorkload) activities.QueueEntry {
	return activities.QueueEntry{Workload: q.Workload.ID, Project: q.Workload.Project, Run: q.Run, Step: q.Step,
		Submitted: q.Workload.Submitted, GPUs: gangAmounts(q.Workload)}
}

// gangAmounts sums a gang's request per GPU type, sorted by type.
func gangAmounts(w gpu.Workload) []gpu.Amount {
	var out []gpu.Amount
	for _, ps := range w.PodSets {
		i := slices.IndexFunc(out, func(a gpu.Amount) bool { return a.Resource == ps.Resource })
		if i < 0 {
			out = append(out, gpu.Amount{Resource: ps.Resource})
			i = len(out) - 1
		}
		out[i].Units += ps.Count * ps.Per
	}
	slices.SortFunc(out, func(x, y gpu.Amount) int { return strings.Compare(string(x.Resource), string(y.Resource)) })
	return out
}
