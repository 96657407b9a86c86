package workflows

import (
	"fmt"
	"slices"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/gpu"
)

// versionBatchedControl guards batched control traffic (workflow.GetVersion
// change ID; never reuse it). A burst of Kubernetes steps (a forEach of
// items on clusters, GPU items above all) used to cost, per item, a
// cluster selection activity, a GPU submit activity, an "admitted" signal
// and a release signal. A run now sends what its steps ask for in the same
// workflow task together: one selection activity, one submit activity per
// cluster, one release signal per cluster; and its cluster's admission
// workflow answers it once per decision round (SignalGPUUpdates). Runs
// recorded before it select, submit and release one at a time.
const versionBatchedControl = "atelier.batched-control"

// batchedControl reports whether this run batches its control traffic.
func (r *Run) batchedControl(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionBatchedControl, workflow.DefaultVersion, 1) >= 1
}

// batcher is a run's batched control traffic, sent by one coroutine
// (started on first use) so that everything queued while it was busy
// travels together.
type batcher struct {
	selects  []*queued[activities.SelectClusterRequest]
	submits  []*queued[activities.SubmitWorkloadRequest]
	releases []*gpuRelease
}

// queued is a request waiting for a round, or in its round's activity
// (taken); set answers it.
type queued[Req any] struct {
	req   Req
	set   workflow.Settable
	taken bool
}

// enqueue adds req to queue for the next round and waits for its answer
// or ctx's cancellation; on cancellation before a round took it, it
// leaves the queue. ready is false when cancelled first.
func enqueue[Req any](ctx, root workflow.Context, queue *[]*queued[Req], req Req) (q *queued[Req], fut workflow.Future, ready bool) {
	fut, set := workflow.NewFuture(root)
	q = &queued[Req]{req: req, set: set}
	*queue = append(*queue, q)
	if awaitFuture(ctx, fut) {
		return q, fut, true
	}
	if !q.taken {
		*queue = slices.DeleteFunc(*queue, func(x *queued[Req]) bool { return x == q })
	}
	return q, fut, false
}

// take marks qs handed to an activity and returns their requests and
// answer slots.
func take[Req any](qs []*queued[Req]) ([]Req, []workflow.Settable) {
	reqs, sets := make([]Req, len(qs)), make([]workflow.Settable, len(qs))
	for i, q := range qs {
		q.taken = true
		reqs[i], sets[i] = q.req, q.set
	}
	return reqs, sets
}

// gpuRelease is a workload whose GPUs are being given back.
type gpuRelease struct {
	cluster, id string
	set         workflow.Settable
}

// startBatcher starts, once per run, the coroutine that sends queued
// requests: each round takes all that is queued, runs one selection
// activity, one submit activity and one release signal per cluster, and
// waits for them while the next round's queue fills. Its context is
// disconnected: releases must still be sent once the run is cancelled.
func (r *Run) startBatcher() {
	if r.batch != nil {
		return
	}
	r.batch = &batcher{}
	b := r.batch
	ctx, _ := workflow.NewDisconnectedContext(r.root)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			if err := workflow.Await(ctx, func() bool { return len(b.selects)+len(b.submits)+len(b.releases) > 0 }); err != nil {
				return
			}
			selects, submits, releases := b.selects, b.submits, b.releases
			b.selects, b.submits, b.releases = nil, nil, nil
			var pending []workflow.Future
			if f := r.sendSelects(ctx, selects); f != nil {
				pending = append(pending, f)
			}
			for _, cluster := range clustersOf(submits, releases) {
				if f := r.sendSubmits(ctx, cluster, submits); f != nil {
					pending = append(pending, f)
				}
				if f := r.sendReleases(ctx, cluster, releases); f != nil {
					pending = append(pending, f)
				}
			}
			for _, f := range pending {
				_ = f.Get(ctx, nil)
			}
		}
	})
}

// clustersOf lists the clusters of a round, in the order first queued.
func clustersOf(submits []*queued[activities.SubmitWorkloadRequest], releases []*gpuRelease) []string {
	var out []string
	for _, s := range submits {
		if !slices.Contains(out, s.req.Cluster) {
			out = append(out, s.req.Cluster)
		}
	}
	for _, rl := range releases {
		if !slices.Contains(out, rl.cluster) {
			out = append(out, rl.cluster)
		}
	}
	return out
}

// sendSelects runs one selection activity for the round's steps and
// answers each when it completes (nil: nothing to select).
func (r *Run) sendSelects(ctx workflow.Context, sels []*queued[activities.SelectClusterRequest]) workflow.Future {
	if len(sels) == 0 {
		return nil
	}
	reqs, sets := take(sels)
	f := workflow.ExecuteActivity(r.controlActivity(ctx, activities.ErrTypeNoCluster), activities.SelectClustersName, activities.SelectClustersRequest{Requests: reqs})
	return answerEach(ctx, f, sets, func(r activities.SelectClustersResult) []activities.SelectClusterOutcome { return r.Results })
}

// answerEach settles sets[i] with the i-th answer of activity f once it
// completes (its error if it failed, or if it answered fewer requests than
// it got). The returned future is ready once all are settled.
func answerEach[R, T any](ctx workflow.Context, f workflow.Future, sets []workflow.Settable, answers func(R) []T) workflow.Future {
	done, settle := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		var res R
		err := f.Get(ctx, &res)
		got := answers(res)
		for i, set := range sets {
			switch {
			case err != nil:
				set.Set(nil, err)
			case i >= len(got):
				set.Set(nil, temporal.NewApplicationError(fmt.Sprintf("the activity answered %d requests of %d", len(got), len(sets)), "InvalidAnswer"))
			default:
				set.Set(got[i], nil)
			}
		}
		settle.Set(nil, nil)
	})
	return done
}

// selectBatched queues a cluster selection for the next round and waits
// for its answer. "Nothing matches" is the ErrTypeNoCluster error the
// single selection activity returns.
func (r *Run) selectBatched(ctx workflow.Context, req activities.SelectClusterRequest) (activities.SelectClusterResult, error) {
	r.startBatcher()
	_, fut, ready := enqueue(ctx, r.root, &r.batch.selects, req)
	if !ready {
		return activities.SelectClusterResult{}, temporal.NewCanceledError()
	}
	var out activities.SelectClusterOutcome
	if err := fut.Get(ctx, &out); err != nil {
		return activities.SelectClusterResult{}, err
	}
	if out.NoCluster != "" {
		return activities.SelectClusterResult{}, temporal.NewNonRetryableApplicationError(out.NoCluster, activities.ErrTypeNoCluster, nil)
	}
	return out.SelectClusterResult, nil
}

// sendSubmits runs one submit activity for the round's submissions to
// cluster and answers each of them when it completes. The returned future
// is ready once they are answered (nil: nothing to submit).
func (r *Run) sendSubmits(ctx workflow.Context, cluster string, all []*queued[activities.SubmitWorkloadRequest]) workflow.Future {
	var subs []*queued[activities.SubmitWorkloadRequest]
	for _, q := range all {
		if q.req.Cluster == cluster {
			subs = append(subs, q)
		}
	}
	if len(subs) == 0 {
		return nil
	}
	reqs, sets := take(subs)
	f := workflow.ExecuteActivity(r.controlActivity(ctx, activities.ErrTypeInvalidStep), activities.SubmitWorkloadsName,
		activities.SubmitWorkloadsRequest{Cluster: cluster, Requests: reqs})
	return answerEach(ctx, f, sets, func(r activities.SubmitWorkloadsResult) []activities.SubmitWorkloadOutcome { return r.Results })
}

// sendReleases gives back, in one signal, the round's workloads on
// cluster. Best effort, as releaseWorkload: a lost release is found by the
// admission workflow when it next signals this (ended) run.
func (r *Run) sendReleases(ctx workflow.Context, cluster string, all []*gpuRelease) workflow.Future {
	var rels []*gpuRelease
	req := activities.AdmissionRequest{Op: activities.AdmissionBatch}
	for _, rl := range all {
		if rl.cluster == cluster {
			rels = append(rels, rl)
			req.Requests = append(req.Requests, activities.AdmissionRequest{Op: activities.AdmissionRelease, Workload: gpu.Workload{ID: rl.id}})
		}
	}
	if len(rels) == 0 {
		return nil
	}
	done, settle := workflow.NewFuture(ctx)
	f := workflow.SignalExternalWorkflow(ctx, activities.AdmissionWorkflowID(cluster), "", activities.SignalAdmissionRequest, req)
	workflow.Go(ctx, func(ctx workflow.Context) {
		_ = f.Get(ctx, nil)
		for _, rl := range rels {
			rl.set.Set(nil, nil)
		}
		settle.Set(nil, nil)
	})
	return done
}

// submitBatched queues req for the next submit round and waits for its
// answer. Cancelled before the round took it, it is dropped; cancelled
// while its round is in flight, it waits for the answer and withdraws
// what was queued. A refusal is the InvalidStep error the single submit
// activity returns.
func (r *Run) submitBatched(ctx workflow.Context, req activities.SubmitWorkloadRequest) (activities.SubmitWorkloadResult, error) {
	r.startBatcher()
	q, fut, ready := enqueue(ctx, r.root, &r.batch.submits, req)
	if !ready {
		if !q.taken {
			return activities.SubmitWorkloadResult{}, temporal.NewCanceledError()
		}
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		var out activities.SubmitWorkloadOutcome
		if fut.Get(dctx, &out) == nil && out.Queued {
			r.releaseBatched(dctx, req.Cluster, req.Workload.ID)
		}
		return activities.SubmitWorkloadResult{}, temporal.NewCanceledError()
	}
	var out activities.SubmitWorkloadOutcome
	if err := fut.Get(ctx, &out); err != nil {
		return activities.SubmitWorkloadResult{}, err
	}
	if out.Refused != "" {
		return activities.SubmitWorkloadResult{}, temporal.NewNonRetryableApplicationError(out.Refused, activities.ErrTypeInvalidStep, nil)
	}
	return out.SubmitWorkloadResult, nil
}

// releaseBatched gives a workload's GPUs back in the next release round
// and waits until it is sent (ctx must not be cancelled: a disconnected
// one on the way out).
func (r *Run) releaseBatched(ctx workflow.Context, cluster, id string) {
	r.startBatcher()
	fut, set := workflow.NewFuture(r.root)
	r.batch.releases = append(r.batch.releases, &gpuRelease{cluster: cluster, id: id, set: set})
	_ = fut.Get(ctx, nil)
}

// awaitFuture waits for f or for ctx's cancellation (a settable future's
// Get does not return on cancellation); true when f is ready.
func awaitFuture(ctx workflow.Context, f workflow.Future) bool {
	if f.IsReady() {
		return true
	}
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(f, func(workflow.Future) {})
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {})
	sel.Select(ctx)
	return f.IsReady()
}
