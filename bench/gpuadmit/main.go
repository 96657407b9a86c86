// Command gpuadmit measures GPU admission end to end on the real stack (a
// Temporal dev server, Postgres, the real worker running the admission
// workflow and its activities): how many workloads per second a cluster's
// admission workflow admits, how long a workload that fits waits behind a
// deep queue of workloads that do not, and how long a preemption takes from
// the high-priority submission to the victim being told. The baseline, in
// the same run, is a bare signal round trip between two workflows: the
// floor any durable admission pays. See bench/doc.go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/bench/internal/benchstack"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/process/config"
)

const (
	cluster  = "bench-gpu"
	gpuType  = gpu.Resource("NVIDIA-H100-80GB-HBM3")
	projects = 30 // Kueue's performance suite: 30 queues
)

// Targets of the issue, printed next to the figures (never asserted).
const (
	targetRate       = 200.0 // admissions per second
	targetWaitP50    = time.Second
	targetPreemptP50 = time.Second
)

func main() {
	n := flag.Int("n", 3000, "workloads in the throughput phase")
	depth := flag.Int("depth", 1000, "blocked workloads queued ahead in the wait phase")
	probes := flag.Int("probes", 50, "fitting workloads measured in the wait phase")
	preempts := flag.Int("preempts", 20, "preemptions measured")
	nodes := flag.Int("nodes", 1000, "GPU nodes (8 GPUs each)")
	runs := flag.Int("runs", 2, "pipeline path: runs started at once")
	items := flag.Int("items", 1000, "pipeline path: GPU items per run (a forEach; at most 1,000, the small forEach's limit)")
	reps := flag.Int("reps", 3, "pipeline path: rounds (baseline and subject interleaved)")
	only := flag.Bool("pipeline-only", false, "run the pipeline path only")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of this process (the worker running the runs and the admission workflow, the benchmark) to this file")
	quick := flag.Bool("quick", false, "smoke run: -n 300 -depth 100 -probes 10 -preempts 5 -runs 2 -items 100 -reps 1")
	flag.Parse()
	if *quick {
		*n, *depth, *probes, *preempts, *runs, *items, *reps = 300, 100, 10, 5, 2, 100, 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gpuadmit:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(ctx, *n, *depth, *probes, *preempts, *nodes, pipelineOpts{runs: *runs, items: *items, reps: *reps, only: *only}); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "gpuadmit:", err)
		os.Exit(1)
	}
}

// WaiterInput is one benchmark workload: a workflow standing in for a
// pipeline step that needs GPUs.
type WaiterInput struct {
	Workload gpu.Workload
	// Hold is how long it keeps its GPUs once admitted (0: give them back
	// at once; -1: until preempted).
	Hold time.Duration
	// Echo runs the same protocol against the granter (the baseline): an
	// activity that signal-with-starts one long-lived workflow, which
	// answers "admitted" at once, with no catalogue read and no scheduler.
	Echo bool
}

// WaiterResult is what the waiter observed, in workflow time.
type WaiterResult struct {
	Submitted, Admitted, Preempted time.Time
}

// waiter submits its workload with the real submit activity, waits for the
// admission (or a preemption), holds, and releases: the protocol a
// pipeline run with one GPU step follows.
func waiter(ctx workflow.Context, in WaiterInput) (WaiterResult, error) {
	var res WaiterResult
	res.Submitted = workflow.Now(ctx)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           activities.ControlTaskQueue(workflow.GetInfo(ctx).TaskQueueName),
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5},
	})
	in.Workload.ID = workflow.GetInfo(ctx).WorkflowExecution.ID
	in.Workload.Submitted = res.Submitted
	if in.Echo {
		actx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		if err := workflow.ExecuteActivity(actx, "bench.gpu.echo-submit", in.Workload.ID).Get(ctx, nil); err != nil {
			return res, err
		}
		workflow.GetSignalChannel(ctx, activities.SignalGPUAdmitted).Receive(ctx, nil)
		res.Admitted = workflow.Now(ctx)
		return res, workflow.SignalExternalWorkflow(ctx, granterID, "", "release", in.Workload.ID).Get(ctx, nil)
	}
	// The protocol of a run today (atelier.batched-control): a batch
	// submit (of one workload here), answers in SignalGPUUpdates, a batch
	// release.
	var sub activities.SubmitWorkloadsResult
	if err := workflow.ExecuteActivity(actx, activities.SubmitWorkloadsName, activities.SubmitWorkloadsRequest{
		Cluster: cluster, Requests: []activities.SubmitWorkloadRequest{{Cluster: cluster, Run: in.Workload.ID, Step: "step", Workload: in.Workload}},
	}).Get(ctx, &sub); err != nil {
		return res, err
	}
	if len(sub.Results) != 1 || !sub.Results[0].Queued {
		return res, fmt.Errorf("not queued (admission off, or refused: %+v)", sub.Results)
	}
	updates := workflow.GetSignalChannel(ctx, activities.SignalGPUUpdates)
	for res.Admitted.IsZero() {
		var u activities.GPUUpdates
		updates.Receive(ctx, &u)
		if len(u.Admitted) > 0 {
			res.Admitted = workflow.Now(ctx)
		}
	}
	switch {
	case in.Hold < 0:
		for res.Preempted.IsZero() {
			var u activities.GPUUpdates
			updates.Receive(ctx, &u)
			if len(u.Preempt) > 0 {
				res.Preempted = workflow.Now(ctx)
			}
		}
	case in.Hold > 0:
		_ = workflow.Sleep(ctx, in.Hold)
	}
	err := workflow.SignalExternalWorkflow(ctx, activities.AdmissionWorkflowID(cluster), "", activities.SignalAdmissionRequest,
		activities.AdmissionRequest{Op: activities.AdmissionBatch, Requests: []activities.AdmissionRequest{
			{Op: activities.AdmissionRelease, Workload: gpu.Workload{ID: in.Workload.ID}}}}).Get(ctx, nil)
	return res, err
}

// throughput is workloads per second from the first submission to the
// last admission, and each workload's wait.
func throughput(results []WaiterResult) (float64, []time.Duration) {
	first, last := results[0].Submitted, results[0].Admitted
	var waits []time.Duration
	for _, r := range results {
		if r.Admitted.After(last) {
			last = r.Admitted
		}
		if r.Submitted.Before(first) {
			first = r.Submitted
		}
		waits = append(waits, r.Admitted.Sub(r.Submitted))
	}
	return float64(len(results)) / last.Sub(first).Seconds(), waits
}

// granterID is the baseline's stand-in for the admission workflow.
const granterID = "bench-gpu-granter"

// echoSubmit is the baseline's submit activity: a signal-with-start of the
// granter, as the real submit does to the admission workflow.
func echoSubmit(ctx context.Context, from string) error {
	_, err := activity.GetClient(ctx).SignalWithStartWorkflow(ctx, granterID, "grant", from,
		client.StartWorkflowOptions{ID: granterID, TaskQueue: activity.GetInfo(ctx).TaskQueue}, "bench.gpu.granter")
	return err
}

// granter answers every grant with "admitted" at once (at most 500
// signals in flight, like the admission workflow's outbox) and ignores
// releases. It runs until the benchmark's stack is torn down; a grant and
// a release cost about 4 history events, so -n up to 10,000 stays within
// Temporal's 51,200.
func granter(ctx workflow.Context) error {
	grants := workflow.GetSignalChannel(ctx, "grant")
	releases := workflow.GetSignalChannel(ctx, "release")
	inflight := 0
	for {
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(grants, func(c workflow.ReceiveChannel, _ bool) {
			var from string
			c.Receive(ctx, &from)
			_ = workflow.Await(ctx, func() bool { return inflight < 500 })
			inflight++
			workflow.Go(ctx, func(gctx workflow.Context) {
				defer func() { inflight-- }()
				_ = workflow.SignalExternalWorkflow(gctx, from, "", activities.SignalGPUAdmitted, activities.GPUAdmitted{Workload: from}).Get(gctx, nil)
			})
		})
		sel.AddReceive(releases, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
		sel.Select(ctx)
	}
}

// sink stands in for many runs: it receives count admissions and returns
// when each arrived.
func sink(ctx workflow.Context, count int) ([]time.Time, error) {
	ch := workflow.GetSignalChannel(ctx, activities.SignalGPUAdmitted)
	out := make([]time.Time, 0, count)
	for len(out) < count {
		ch.Receive(ctx, nil)
		out = append(out, workflow.Now(ctx))
	}
	return out, nil
}

// pong answers each ping with a signal back: the baseline.
func pong(ctx workflow.Context, count int) error {
	ch := workflow.GetSignalChannel(ctx, "ping")
	for range count {
		var from string
		ch.Receive(ctx, &from)
		if err := workflow.SignalExternalWorkflow(ctx, from, "", "pong", nil).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// ping signals pong and waits for the answer, like a waiter waits for its
// admission.
func ping(ctx workflow.Context, pongID string) (time.Duration, error) {
	start := workflow.Now(ctx)
	if err := workflow.SignalExternalWorkflow(ctx, pongID, "", "ping", workflow.GetInfo(ctx).WorkflowExecution.ID).Get(ctx, nil); err != nil {
		return 0, err
	}
	workflow.GetSignalChannel(ctx, "pong").Receive(ctx, nil)
	return workflow.Now(ctx).Sub(start), nil
}

// pipelineOpts sizes the pipeline-path phase.
type pipelineOpts struct {
	runs, items, reps int
	only              bool
}

func run(ctx context.Context, n, depth, probes, preempts, nodeCount int, po pipelineOpts) error {
	st, err := benchstack.Start(ctx, benchstack.Options{Name: "gpuadmit", Worker: true, Configure: func(c *config.Config) {
		c.GPUMinRuntime = time.Millisecond // preemption phase: victims are preemptible at once
		c.WorkerConcurrency = 256
	}, Register: func(r worker.Registry) {
		r.RegisterWorkflowWithOptions(waiter, workflow.RegisterOptions{Name: "bench.gpu.waiter"})
		r.RegisterWorkflowWithOptions(pong, workflow.RegisterOptions{Name: "bench.gpu.pong"})
		r.RegisterWorkflowWithOptions(sink, workflow.RegisterOptions{Name: "bench.gpu.sink"})
		r.RegisterWorkflowWithOptions(ping, workflow.RegisterOptions{Name: "bench.gpu.ping"})
		r.RegisterWorkflowWithOptions(granter, workflow.RegisterOptions{Name: "bench.gpu.granter"})
		r.RegisterActivityWithOptions(echoSubmit, activity.RegisterOptions{Name: "bench.gpu.echo-submit"})
	}})
	if err != nil {
		return err
	}
	defer st.Close()
	if err := seed(ctx, st, nodeCount); err != nil {
		return err
	}
	st.Info.Print(os.Stdout)
	fmt.Printf("cluster: %d nodes × 8 %s; %d projects\n\n", nodeCount, gpuType, projects)

	// 0. The pipeline path: GPU items of real runs (forEach), against the
	// same items without GPUs.
	if err := pipelinePhase(ctx, st, po.runs, po.items, po.reps); err != nil {
		return fmt.Errorf("pipeline path: %w", err)
	}
	if po.only {
		return nil
	}

	base, err := baseline(ctx, st, probes)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	bs := benchstack.Summarize(base)
	fmt.Printf("baseline: signal round trip between two workflows, %d samples: p50 %s, p90 %s, p99 %s, max %s\n\n",
		bs.N, benchstack.Ms(bs.P50), benchstack.Ms(bs.P90), benchstack.Ms(bs.P99), benchstack.Ms(bs.Max))

	// 0. Throughput baseline: the same per-workload protocol (a workflow
	// per workload, a submit activity that signal-with-starts one
	// long-lived workflow, an answer signal, a release signal) against a
	// workflow that grants at once: what the server costs, without
	// Atelier's admission.
	benchstack.Logf("throughput baseline: %d echo workloads", n)
	echo, err := runWaiters(ctx, st, n, func(int) WaiterInput { return WaiterInput{Echo: true} })
	if err != nil {
		return fmt.Errorf("throughput baseline: %w", err)
	}
	echoRate, echoWaits := throughput(echo)
	es := benchstack.Summarize(echoWaits)
	fmt.Printf("throughput baseline (same protocol, instant grants): %.0f grants/s; wait p50 %s, p99 %s\n",
		echoRate, benchstack.Ms(es.P50), benchstack.Ms(es.P99))

	// 1. Throughput: n one-GPU workloads over 30 projects, all fitting,
	// given back at once.
	benchstack.Logf("throughput: %d workloads", n)
	start := time.Now()
	results, err := runWaiters(ctx, st, n, func(i int) WaiterInput {
		return WaiterInput{Workload: workload(fmt.Sprintf("p%02d", i%projects), 1, nil)}
	})
	if err != nil {
		return err
	}
	wall := time.Since(start)
	rate, waits := throughput(results)
	ws := benchstack.Summarize(waits)
	fmt.Printf("throughput: %d workloads admitted (%s wall with start-up): %.0f admissions/s, %.2f× the baseline (target ≥ %.0f: %s)\n",
		n, wall.Round(time.Millisecond), rate, rate/echoRate, targetRate, benchstack.Verdict(rate >= targetRate))
	fmt.Printf("  wait from submission to admission: p50 %s, p90 %s, p99 %s, max %s\n\n",
		benchstack.Ms(ws.P50), benchstack.Ms(ws.P90), benchstack.Ms(ws.P99), benchstack.Ms(ws.Max))

	// 1b. The admission workflow alone: n submissions signalled straight to
	// it, answered to one sink workflow (no per-workload workflow).
	benchstack.Logf("admission workflow alone: %d submissions", n)
	sinkID := fmt.Sprintf("sink-%d", time.Now().UnixNano())
	srun, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: sinkID, TaskQueue: st.Cfg.TaskQueue}, "bench.gpu.sink", n)
	if err != nil {
		return err
	}
	sent := time.Now()
	if err := signalSubmissions(ctx, st, sinkID, n); err != nil {
		return err
	}
	var arrivals []time.Time
	if err := srun.Get(ctx, &arrivals); err != nil {
		return err
	}
	lastArrival := arrivals[len(arrivals)-1]
	alone := float64(n) / lastArrival.Sub(sent).Seconds()
	fmt.Printf("admission workflow alone: %d submissions signalled (32 clients) and admitted in %s: %.0f admissions/s (target ≥ %.0f: %s)\n\n",
		n, lastArrival.Sub(sent).Round(time.Millisecond), alone, targetRate, benchstack.Verdict(alone >= targetRate))
	if err := releaseAll(ctx, st, sinkID, n); err != nil {
		return err
	}

	// 2. Wait behind a deep queue: depth workloads of a project over its
	// quota stay queued; probes of another project fit and are timed.
	benchstack.Logf("wait: %d blocked, %d probes", depth, probes)
	blocked, err := startWaiters(ctx, st, "blocked", depth, func(int) WaiterInput {
		return WaiterInput{Workload: workload("capped", 1, nil)}
	})
	if err != nil {
		return err
	}
	if err := waitQueueDepth(ctx, st, depth); err != nil {
		return err
	}
	var probeWaits []time.Duration
	for i := range probes {
		r, err := runWaiters(ctx, st, 1, func(int) WaiterInput {
			return WaiterInput{Workload: workload(fmt.Sprintf("p%02d", i%projects), 1, nil)}
		})
		if err != nil {
			return err
		}
		probeWaits = append(probeWaits, r[0].Admitted.Sub(r[0].Submitted))
	}
	ps := benchstack.Summarize(probeWaits)
	fmt.Printf("wait at queue depth %d: a fitting workload, %d samples: p50 %s, p90 %s, p99 %s, max %s; %s the baseline p50 (target p50 ≤ %s: %s)\n\n",
		depth, ps.N, benchstack.Ms(ps.P50), benchstack.Ms(ps.P90), benchstack.Ms(ps.P99), benchstack.Ms(ps.Max),
		benchstack.Ratio(float64(ps.P50), float64(bs.P50)), targetWaitP50, benchstack.Verdict(ps.P50 <= targetWaitP50))
	for _, id := range blocked {
		_ = st.Client.CancelWorkflow(ctx, id, "")
	}

	// 3. Preemption: a low-priority workload holds the project's whole
	// quota; a high-priority one arrives. Timed: submission to the victim
	// told, and to the high-priority admission.
	benchstack.Logf("preemption: %d rounds", preempts)
	var told, admittedAfter []time.Duration
	for i := range preempts {
		low := 0
		victims, err := startWaiters(ctx, st, fmt.Sprintf("victim-%d", i), 1, func(int) WaiterInput {
			return WaiterInput{Workload: workload("urgent", 8, &low), Hold: -1}
		})
		if err != nil {
			return err
		}
		if err := waitAdmitted(ctx, st, victims[0]); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
		high := 10
		r, err := runWaiters(ctx, st, 1, func(int) WaiterInput { return WaiterInput{Workload: workload("urgent", 8, &high)} })
		if err != nil {
			return err
		}
		var v WaiterResult
		if err := st.Client.GetWorkflow(ctx, victims[0], "").Get(ctx, &v); err != nil {
			return err
		}
		told = append(told, v.Preempted.Sub(r[0].Submitted))
		admittedAfter = append(admittedAfter, r[0].Admitted.Sub(r[0].Submitted))
	}
	ts, as := benchstack.Summarize(told), benchstack.Summarize(admittedAfter)
	fmt.Printf("preemption, %d samples: high-priority submission to victim told p50 %s, p90 %s, max %s (target p50 ≤ %s: %s); to high-priority admission (victim gave its GPUs back) p50 %s, p90 %s, max %s\n",
		ts.N, benchstack.Ms(ts.P50), benchstack.Ms(ts.P90), benchstack.Ms(ts.Max), targetPreemptP50, benchstack.Verdict(ts.P50 <= targetPreemptP50),
		benchstack.Ms(as.P50), benchstack.Ms(as.P90), benchstack.Ms(as.Max))
	return nil
}

// seed registers the cluster with its inventory and gives the projects
// their policies: p00..p29 plenty of quota, "capped" none left, "urgent"
// exactly one node's worth with priorities.
func seed(ctx context.Context, st *benchstack.Stack, nodeCount int) error {
	if _, _, err := st.Store.UpsertCluster(ctx, catalog.Cluster{Name: cluster, TaskQueue: activities.TaskQueueForCluster(cluster)}); err != nil {
		return err
	}
	inv := make([]gpu.Node, nodeCount)
	for i := range inv {
		inv[i] = gpu.Node{Name: "n" + strconv.Itoa(i), GPUType: gpuType, GPUMemoryMiB: 81559, GPUs: 8, Ready: true}
	}
	if err := st.Store.ReportClusterCapacity(ctx, cluster, catalog.ClusterCapacity{GPUs: map[string]catalog.ResourceAmount{}, GPUNodes: inv}, time.Now()); err != nil {
		return err
	}
	names := []string{"capped", "urgent", sweepProject}
	for i := range projects {
		names = append(names, fmt.Sprintf("p%02d", i))
	}
	for _, name := range names {
		if _, err := st.Store.CreateProject(ctx, catalog.Project{Name: name}); err != nil && !errors.Is(err, catalog.ErrConflict) {
			return err
		}
		p := gpu.ProjectPolicy{Name: name, Cohort: name, Quotas: []gpu.Quota{{Resource: gpuType, Nominal: nodeCount * 8 / (projects + 2)}}}
		switch name {
		case "capped":
			p.Quotas[0].Nominal = 0
		case "urgent":
			p.Quotas[0].Nominal, p.MaxPriority = 8, 100
		case sweepProject:
			p.Quotas[0].Nominal = nodeCount * 8
		}
		if _, err := st.Store.PutGPUPolicy(ctx, catalog.GPUPolicy{ProjectPolicy: p}); err != nil {
			return err
		}
	}
	return nil
}

func workload(project string, gpus int, prio *int) gpu.Workload {
	return gpu.Workload{Project: project, Priority: prio, PodSets: []gpu.PodSet{{Name: "step", Count: 1, Per: gpus, Resource: gpuType}}}
}

var seq int

// startWaiters starts count waiters and returns their workflow IDs.
func startWaiters(ctx context.Context, st *benchstack.Stack, prefix string, count int, in func(int) WaiterInput) ([]string, error) {
	seq++
	ids := make([]string, count)
	var wg sync.WaitGroup
	errs := make(chan error, count)
	sem := make(chan struct{}, 32)
	for i := range count {
		ids[i] = fmt.Sprintf("%s-%d-%d", prefix, seq, i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: ids[i], TaskQueue: st.Cfg.TaskQueue}, "bench.gpu.waiter", in(i))
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return ids, <-errs
}

// runWaiters starts count waiters and waits for their results.
func runWaiters(ctx context.Context, st *benchstack.Stack, count int, in func(int) WaiterInput) ([]WaiterResult, error) {
	ids, err := startWaiters(ctx, st, "w", count, in)
	if err != nil {
		return nil, err
	}
	out := make([]WaiterResult, count)
	for i, id := range ids {
		if err := st.Client.GetWorkflow(ctx, id, "").Get(ctx, &out[i]); err != nil {
			return nil, fmt.Errorf("waiter %s: %w", id, err)
		}
	}
	return out, nil
}

func queue(ctx context.Context, st *benchstack.Stack) (activities.AdmissionQueue, error) {
	var q activities.AdmissionQueue
	v, err := st.Client.QueryWorkflow(ctx, activities.AdmissionWorkflowID(cluster), "", activities.QueryAdmissionQueue)
	if err != nil {
		return q, err
	}
	return q, v.Get(&q)
}

func waitQueueDepth(ctx context.Context, st *benchstack.Stack, depth int) error {
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		if q, err := queue(ctx, st); err == nil && len(q.Pending) >= depth {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the queue never reached depth %d", depth)
}

func waitAdmitted(ctx context.Context, st *benchstack.Stack, id string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if q, err := queue(ctx, st); err == nil {
			for _, e := range q.Running {
				if e.Workload == id {
					return nil
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("%s never admitted", id)
}

// baseline times signal round trips: a ping workflow signals a pong
// workflow, which signals back.
func baseline(ctx context.Context, st *benchstack.Stack, samples int) ([]time.Duration, error) {
	pongID := fmt.Sprintf("pong-%d", time.Now().UnixNano())
	if _, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: pongID, TaskQueue: st.Cfg.TaskQueue}, "bench.gpu.pong", samples); err != nil {
		return nil, err
	}
	var out []time.Duration
	for i := range samples {
		run, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("%s-ping-%d", pongID, i), TaskQueue: st.Cfg.TaskQueue}, "bench.gpu.ping", pongID)
		if err != nil {
			return nil, err
		}
		var d time.Duration
		if err := run.Get(ctx, &d); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// signalSubmissions sends n submit signals to the admission workflow, from
// 32 clients, answering to the sink.
func signalSubmissions(ctx context.Context, st *benchstack.Stack, sinkID string, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			w := workload(fmt.Sprintf("p%02d", i%projects), 1, nil)
			w.ID = fmt.Sprintf("%s/%d", sinkID, i)
			w.Submitted = time.Now()
			_, err := st.Client.SignalWithStartWorkflow(ctx, activities.AdmissionWorkflowID(cluster), activities.SignalAdmissionRequest,
				activities.AdmissionRequest{Op: activities.AdmissionSubmit, Workload: w, Run: sinkID, Step: "step"},
				client.StartWorkflowOptions{ID: activities.AdmissionWorkflowID(cluster), TaskQueue: st.Cfg.TaskQueue},
				activities.AdmissionWorkflowName, activities.AdmissionInput{Cluster: cluster})
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// releaseAll gives back what the sink's workloads hold.
func releaseAll(ctx context.Context, st *benchstack.Stack, sinkID string, n int) error {
	for i := range n {
		err := st.Client.SignalWorkflow(ctx, activities.AdmissionWorkflowID(cluster), "", activities.SignalAdmissionRequest,
			activities.AdmissionRequest{Op: activities.AdmissionRelease, Workload: gpu.Workload{ID: fmt.Sprintf("%s/%d", sinkID, i)}})
		if err != nil {
			return err
		}
	}
	return nil
}
