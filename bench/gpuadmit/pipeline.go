package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/bench/internal/benchstack"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// sweepProject runs the pipeline-path phase: its quota is the whole
// cluster, so every item fits and the phase measures the protocol, not
// the quota.
const sweepProject = "sweep"

// fakeCluster stands in for the cluster's Kubernetes worker: a step's
// object "runs" at once (or for hold) and succeeds, and the run's cleanup
// has nothing to delete. What a real node adds (API writes, pod start) is
// bench/kubecp's and bench/realnode's subject; this phase measures
// Atelier's part of a GPU burst: selection, admission, the grant's way
// back, the release.
func fakeCluster(st *benchstack.Stack, hold time.Duration) (func(), error) {
	tq := activities.TaskQueueForCluster(cluster)
	w := worker.New(st.Client, tq, worker.Options{MaxConcurrentActivityExecutionSize: 4000, MaxConcurrentActivityTaskPollers: 8})
	w.RegisterActivityWithOptions(func(ctx context.Context, req activities.KubeStepRequest) (activities.KubeStepResult, error) {
		if hold > 0 {
			time.Sleep(hold)
		}
		res := activities.KubeStepResult{Namespace: "bench", Object: "job/" + req.Step}
		res.Outputs = map[string]any{"ok": true}
		return res, nil
	}, activity.RegisterOptions{Name: activities.RunKubeStepName})
	control := worker.New(st.Client, activities.ControlTaskQueue(tq), worker.Options{DisableWorkflowWorker: true})
	control.RegisterActivityWithOptions(func(context.Context, activities.CleanupRunObjectsRequest) (activities.CleanupRunObjectsResult, error) {
		return activities.CleanupRunObjectsResult{}, nil
	}, activity.RegisterOptions{Name: activities.CleanupRunObjectsName})
	if err := w.Start(); err != nil {
		return nil, err
	}
	if err := control.Start(); err != nil {
		w.Stop()
		return nil, err
	}
	return func() { w.Stop(); control.Stop() }, nil
}

// burstResult is one pipeline-path burst: runs × items.
type burstResult struct {
	rate   float64         // items admitted (step scheduled) per second, from the first run's start to the last admission
	waits  []time.Duration // per item: its run started → its Kubernetes step scheduled
	events int             // history events of the runs
	wall   time.Duration
}

// pipelineBurst starts runs runs at once, each a forEach of items items on
// the cluster (one GPU each when gpus), waits for them, and reads from each
// run's history when it started and when each item's Kubernetes step was
// scheduled (admitted and placed; without GPUs, placed). Times are the
// history's event times.
func pipelineBurst(ctx context.Context, st *benchstack.Stack, tag string, runs, items int, gpus bool) (burstResult, error) {
	var res burstResult
	step := pipeline.Step{
		Name:      "trial",
		Placement: &pipeline.Placement{Cluster: cluster},
		// All items at once: GPU admission, not the forEach, bounds what
		// runs (the default parallelism, 100, would feed it 100 at a time).
		ForEach:   &pipeline.ForEach{Items: []byte(strconv.Quote(fmt.Sprintf("0..%d", items-1))), Parallelism: min(items, pipeline.MaxParallelism)},
		Container: &pipeline.Container{Image: "trainer:bench", Command: []string{"train"}},
	}
	if gpus {
		step.Container.Resources = &pipeline.Resources{GPU: 1, GPUType: string(gpuType)}
	}
	spec := pipeline.Spec{Name: "sweep", Steps: []pipeline.Step{step}}
	if err := pipeline.Validate(&spec, pipeline.ValidateOptions{Kubernetes: true}); err != nil {
		return res, fmt.Errorf("pipeline spec: %w", err)
	}
	ids := make([]string, runs)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for i := range runs {
		ids[i] = fmt.Sprintf("sweep-%s-%d-%d", tag, time.Now().UnixNano(), i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := workflows.PipelineInput{RunID: ids[i], Project: sweepProject, Pipeline: "sweep", Version: 1, Spec: spec}
			wr, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: ids[i], TaskQueue: st.Cfg.TaskQueue}, runstate.PipelineWorkflowName, in)
			if err == nil {
				err = wr.Get(ctx, nil)
			}
			if err != nil {
				errs <- fmt.Errorf("run %s: %w", ids[i], err)
			}
		}()
	}
	wg.Wait()
	res.wall = time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return res, err
	}
	// Read from each run's history (a status query of a closed run
	// replays it, which takes minutes for the per-item protocol's): when
	// it started, and when each item's Kubernetes step was scheduled, i.e.
	// placed and admitted.
	var first, last time.Time
	for _, id := range ids {
		var started time.Time
		steps := 0
		iter := st.Client.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() {
			ev, err := iter.Next()
			if err != nil {
				return res, fmt.Errorf("history of %s: %w", id, err)
			}
			res.events++
			at := ev.GetEventTime().AsTime()
			switch {
			case ev.GetWorkflowExecutionStartedEventAttributes() != nil:
				started = at
				if first.IsZero() || at.Before(first) {
					first = at
				}
			case ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == activities.RunKubeStepName:
				steps++
				res.waits = append(res.waits, at.Sub(started))
				if at.After(last) {
					last = at
				}
			}
		}
		if steps != items {
			return res, fmt.Errorf("run %s scheduled %d Kubernetes steps for %d items", id, steps, items)
		}
	}
	res.rate = float64(runs*items) / last.Sub(first).Seconds()
	return res, nil
}

// pipelinePhase measures GPU items through the pipeline path against the
// same items without GPUs (no admission), interleaved, reps times.
func pipelinePhase(ctx context.Context, st *benchstack.Stack, runs, items, reps int) error {
	stop, err := fakeCluster(st, 0)
	if err != nil {
		return err
	}
	defer stop()
	// Warm-up: the admission workflow starts, the workers' caches fill.
	if _, err := pipelineBurst(ctx, st, "warm", 1, 10, true); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	var base, subj []burstResult
	for rep := range reps {
		benchstack.Logf("pipeline path, round %d/%d: %d runs × %d items without GPUs, then with one GPU each", rep+1, reps, runs, items)
		b, err := pipelineBurst(ctx, st, fmt.Sprintf("base%d", rep), runs, items, false)
		if err != nil {
			return fmt.Errorf("baseline burst: %w", err)
		}
		s, err := pipelineBurst(ctx, st, fmt.Sprintf("gpu%d", rep), runs, items, true)
		if err != nil {
			return fmt.Errorf("GPU burst: %w", err)
		}
		base, subj = append(base, b), append(subj, s)
	}
	n := runs * items
	fmt.Printf("pipeline path: %d runs × a forEach of %d items on cluster %s (its Kubernetes worker stands in: objects succeed at once), %d rounds interleaved\n\n", runs, items, cluster, reps)
	fmt.Println("| round | without GPUs (no admission): items placed/s | with 1 GPU each: items admitted/s | ratio | GPU items: run start → admitted p50 / p99 (ms) | history events per item (without / with) |")
	fmt.Println("|---|---|---|---|---|---|")
	var rates []float64
	for i := range subj {
		ws := benchstack.Summarize(subj[i].waits)
		fmt.Printf("| %d | %.0f | **%.0f** | %.2f× | %s / %s | %.1f / %.1f |\n", i+1, base[i].rate, subj[i].rate, subj[i].rate/base[i].rate,
			benchstack.Ms(ws.P50), benchstack.Ms(ws.P99), float64(base[i].events)/float64(n), float64(subj[i].events)/float64(n))
		rates = append(rates, subj[i].rate)
	}
	med := median(rates)
	fmt.Printf("\npipeline path: median %.0f GPU admissions/s end to end (target ≥ %.0f: %s)\n\n", med, targetRate, benchstack.Verdict(med >= targetRate))
	return nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
