// Command overhead measures Atelier's orchestration overhead per step: the
// time from one step's process exit to its successor's process start, for a
// declarative pipeline of N sequential no-op steps, against a hand-written
// Temporal workflow running the same activity. See bench/doc.go.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"time"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"

	enumspb "go.temporal.io/api/enums/v1"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/bench/internal/benchstack"
	"github.com/atelier-ml/atelier/workflows"
)

const (
	project       = "bench"
	pipelineName  = "overhead"
	chainWorkflow = "bench.Chain"
	emptyActivity = "bench.empty"
)

// Targets printed next to the figures (never asserted).
const (
	targetP50      = 8 * time.Millisecond
	targetP99      = 25 * time.Millisecond
	targetP50Ratio = 1.2
)

func main() {
	n := flag.Int("n", 200, "sequential steps per run (2.."+fmt.Sprint(pipeline.MaxSteps)+")")
	r := flag.Int("r", 5, "measured repetitions per mode, interleaved, after one warm-up each")
	quick := flag.Bool("quick", false, "smoke run: -n 20 -r 2 unless given")
	verbose := flag.Bool("v", false, "stack logs at info level")
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["n"] {
			*n = 20
		}
		if !set["r"] {
			*r = 2
		}
	}
	if *n < 2 || *n > pipeline.MaxSteps || *r < 1 {
		fmt.Fprintf(os.Stderr, "overhead: need 2 <= -n <= %d (the gateway accepts no longer pipeline) and -r >= 1\n", pipeline.MaxSteps)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *n, *r, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "overhead:", err)
		os.Exit(1)
	}
}

// span is one step's process lifetime (for the empty activity: the instant
// it ran).
type span struct{ start, finish time.Time }

// mode is one way of running N sequential steps.
type mode struct {
	name, short, what string
	activity          string // activity type of the steps, for history analysis
	run               func(ctx context.Context, st *benchstack.Stack, id string, n int) ([]span, error)
}

// result is one measured repetition of a mode.
type result struct {
	gaps   []time.Duration // FinishedAt(i) → StartedAt(i+1)
	period time.Duration   // mean StartedAt(i) → StartedAt(i+1)
	hist   histStats
}

func run(ctx context.Context, n, reps int, verbose bool) error {
	opts := benchstack.Options{Name: "overhead", Worker: true, Register: register}
	if verbose {
		opts.LogLevel = "info"
	}
	st, err := benchstack.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer st.Close()

	modes := []mode{
		{"baseline", "base", fmt.Sprintf("`%s`: hand-written workflow, %s `true`", chainWorkflow, activities.RunContainerName),
			activities.RunContainerName, runChain(activities.RunContainerName)},
		{"subject", "subj", fmt.Sprintf("`%s`: declarative pipeline, container steps `true`", runstate.PipelineWorkflowName),
			activities.RunContainerName, runPipeline},
		{"empty activity", "empty", fmt.Sprintf("`%s`: same workflow, empty activity (no process)", chainWorkflow),
			emptyActivity, runChain(emptyActivity)},
		{"cached (miss)", "miss", fmt.Sprintf("`%s`: every step cached, every lookup a miss (a cache version per run): lookup, run, store", runstate.PipelineWorkflowName),
			activities.RunContainerName, runPipelineCached},
	}
	results := make([][]result, len(modes))
	for rep := 0; rep <= reps; rep++ { // rep 0 is the warm-up
		for m, md := range modes {
			label := fmt.Sprintf("rep %d/%d", rep, reps)
			if rep == 0 {
				label = "warm-up"
			}
			res, err := measure(ctx, st, md, n, rep)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", md.name, label, err)
			}
			benchstack.Logf("%-14s %-8s p50 %s ms, max %s ms", md.name, label,
				benchstack.Ms(benchstack.Summarize(res.gaps).P50), benchstack.Ms(slices.Max(res.gaps)))
			if rep > 0 {
				results[m] = append(results[m], res)
			}
		}
	}
	report(st, modes, results, n, reps)
	return nil
}

func measure(ctx context.Context, st *benchstack.Stack, md mode, n, rep int) (result, error) {
	id := fmt.Sprintf("overhead-%s-%d-%d", md.short, rep, time.Now().UnixNano())
	rctx, cancel := context.WithTimeout(ctx, time.Duration(n)*time.Second+time.Minute)
	defer cancel()
	spans, err := md.run(rctx, st, id, n)
	if err != nil {
		return result{}, err
	}
	if len(spans) != n {
		return result{}, fmt.Errorf("run %s: %d steps, want %d", id, len(spans), n)
	}
	var res result
	for i := 0; i+1 < n; i++ {
		res.gaps = append(res.gaps, spans[i+1].start.Sub(spans[i].finish))
	}
	res.period = spans[n-1].start.Sub(spans[0].start) / time.Duration(n-1)
	res.hist, err = analyseHistory(rctx, st.Client, id, md.activity, spans)
	return res, err
}

// --- the subject: Atelier's declarative pipeline workflow ---

func pipelineSpec(n int) pipeline.Spec {
	p := pipeline.Spec{Name: pipelineName}
	for i := range n {
		s := pipeline.Step{Name: stepName(i), Container: &pipeline.Container{Command: []string{"true"}}}
		if i > 0 {
			s.DependsOn = []string{stepName(i - 1)}
		}
		p.Steps = append(p.Steps, s)
	}
	return p
}

func stepName(i int) string { return fmt.Sprintf("s%03d", i) }

// runPipeline starts workflows.PipelineWorkflow directly with the SDK (no
// HTTP), waits for it and reads attempt times from the run status mirrored
// to Postgres (falling back to the status query).
func runPipeline(ctx context.Context, st *benchstack.Stack, id string, n int) ([]span, error) {
	return runSpec(ctx, st, id, n, pipelineSpec(n))
}

// runPipelineCached is runPipeline with the step cache on for every step,
// keyed with the run's ID as cache version so that every lookup misses:
// each step pays a lookup before it runs and a store after.
func runPipelineCached(ctx context.Context, st *benchstack.Stack, id string, n int) ([]span, error) {
	p := pipelineSpec(n)
	p.Cache = &pipeline.Cache{Version: id}
	return runSpec(ctx, st, id, n, p)
}

func runSpec(ctx context.Context, st *benchstack.Stack, id string, n int, p pipeline.Spec) ([]span, error) {
	if err := pipeline.Validate(&p, pipeline.ValidateOptions{}); err != nil {
		return nil, fmt.Errorf("pipeline spec: %w", err)
	}
	in := workflows.PipelineInput{RunID: id, Project: project, Pipeline: pipelineName, Version: 1, Spec: p}
	wr, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: st.Cfg.TaskQueue},
		runstate.PipelineWorkflowName, in)
	if err != nil {
		return nil, err
	}
	if err := wr.Get(ctx, nil); err != nil {
		return nil, err
	}
	var status runstate.Status
	if row, err := st.Store.GetRun(ctx, project, id); err == nil && row.Status != nil && row.Status.State.Terminal() {
		status = *row.Status
	} else {
		v, err := st.Client.QueryWorkflow(ctx, id, "", runstate.QueryStatus)
		if err != nil {
			return nil, fmt.Errorf("query status: %w", err)
		}
		if err := v.Get(&status); err != nil {
			return nil, err
		}
	}
	if status.State != runstate.Succeeded {
		return nil, fmt.Errorf("run %s ended %s: %s", id, status.State, status.Error)
	}
	spans := make([]span, 0, len(status.Steps))
	for _, s := range status.Steps {
		if len(s.Attempts) == 0 || s.Attempts[0].StartedAt == nil || s.Attempts[0].FinishedAt == nil {
			return nil, fmt.Errorf("step %s has no attempt times", s.Name)
		}
		spans = append(spans, span{*s.Attempts[0].StartedAt, *s.Attempts[0].FinishedAt})
	}
	return spans, nil
}

// --- the baselines: a hand-written workflow on the same worker ---

func register(r worker.Registry) {
	r.RegisterWorkflowWithOptions(chainWorkflowFunc, workflow.RegisterOptions{Name: chainWorkflow})
	r.RegisterActivityWithOptions(emptyActivityFunc, activity.RegisterOptions{Name: emptyActivity})
}

type chainInput struct {
	N        int    `json:"n"`
	Activity string `json:"activity"`
}

// containerRequest is what the pipeline workflow sends for step i of a
// container step with command ["true"] (no image, args, env, working dir;
// the default attempt timeout).
func containerRequest(runID string, i int) activities.ContainerRequest {
	return activities.ContainerRequest{
		Project: project, RunID: runID, Step: stepName(i), Attempt: 1,
		Command: []string{"true"}, Timeout: pipeline.DefaultStepTimeout,
	}
}

// chainWorkflowFunc runs in.Activity N times in sequence with plain
// activity options and returns the results.
func chainWorkflowFunc(ctx workflow.Context, in chainInput) ([]activities.ContainerResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	out := make([]activities.ContainerResult, 0, in.N)
	for i := range in.N {
		var res activities.ContainerResult
		if err := workflow.ExecuteActivity(ctx, in.Activity, containerRequest(id, i)).Get(ctx, &res); err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// emptyActivityFunc does nothing but note when it ran.
func emptyActivityFunc(_ context.Context, _ activities.ContainerRequest) (activities.ContainerResult, error) {
	now := time.Now()
	return activities.ContainerResult{StartedAt: now, FinishedAt: now}, nil
}

func runChain(act string) func(context.Context, *benchstack.Stack, string, int) ([]span, error) {
	return func(ctx context.Context, st *benchstack.Stack, id string, n int) ([]span, error) {
		wr, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: st.Cfg.TaskQueue},
			chainWorkflow, chainInput{N: n, Activity: act})
		if err != nil {
			return nil, err
		}
		var out []activities.ContainerResult
		if err := wr.Get(ctx, &out); err != nil {
			return nil, err
		}
		spans := make([]span, len(out))
		for i, r := range out {
			spans[i] = span{r.StartedAt, r.FinishedAt}
		}
		return spans, nil
	}
}

// --- where the time goes: history event times against process times ---

// histStats splits each gap i → i+1 at the server's event times:
//
//	seg[0] process exit(i)         → ActivityTaskCompleted(i)  runner wrap-up + completion RPC
//	seg[1] ActivityTaskCompleted(i) → WorkflowTaskStarted       server: schedule + dispatch the workflow task
//	seg[2] WorkflowTaskStarted     → WorkflowTaskCompleted     worker: run workflow code + RPC
//	seg[3] WorkflowTaskCompleted   → process start(i+1)        eager dispatch + runner setup + fork/exec
type histStats struct {
	seg                   [4][]time.Duration
	events, wfts, allActs int
}

func analyseHistory(ctx context.Context, c client.Client, id, actType string, spans []span) (histStats, error) {
	var h histStats
	var evs []*historypb.HistoryEvent
	it := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return h, fmt.Errorf("history of %s: %w", id, err)
		}
		evs = append(evs, e)
	}
	h.events = len(evs)
	step := map[int64]int{} // scheduled event id → step index
	for _, e := range evs {
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			h.wfts++
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			h.allActs++
			if e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == actType {
				step[e.GetEventId()] = len(step)
			}
		}
	}
	if len(step) != len(spans) {
		return h, fmt.Errorf("history of %s: %d %s activities, %d steps", id, len(step), actType, len(spans))
	}
	for k, e := range evs {
		if e.GetEventType() != enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED {
			continue
		}
		i, ok := step[e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()]
		if !ok || i+1 >= len(spans) {
			continue
		}
		var wfStarted, wfDone *historypb.HistoryEvent
		for _, f := range evs[k+1:] {
			if f.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED && wfStarted == nil {
				wfStarted = f
			}
			if f.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED && wfStarted != nil {
				wfDone = f
				break
			}
		}
		if wfDone == nil {
			continue
		}
		done, ws, wd := e.GetEventTime().AsTime(), wfStarted.GetEventTime().AsTime(), wfDone.GetEventTime().AsTime()
		h.seg[0] = append(h.seg[0], done.Sub(spans[i].finish))
		h.seg[1] = append(h.seg[1], ws.Sub(done))
		h.seg[2] = append(h.seg[2], wd.Sub(ws))
		h.seg[3] = append(h.seg[3], spans[i+1].start.Sub(wd))
	}
	return h, nil
}

// --- report ---

func report(st *benchstack.Stack, modes []mode, results [][]result, n, reps int) {
	out := os.Stdout
	fmt.Fprintf(out, "## bench/overhead: orchestration overhead per step\n\n")
	st.Info.Print(out)
	fmt.Fprintf(out, "N=%d sequential no-op steps per run; R=%d measured runs per mode, interleaved (baseline, subject, empty, cached miss, baseline, ...) after one warm-up each; %d samples per mode.\n",
		n, reps, reps*(n-1))
	fmt.Fprintf(out, "Sample = attempts[0].StartedAt(i+1) − attempts[0].FinishedAt(i): process exit of a step to process start of its successor. One in-process worker (task queue %s).\n\n", st.Cfg.TaskQueue)

	fmt.Fprintf(out, "| mode | what | p50 ms | p90 ms | p99 ms | max ms | per-run p50 min–max ms | mean step period ms |\n")
	fmt.Fprintf(out, "|---|---|---|---|---|---|---|---|\n")
	sums := make([]benchstack.Summary, len(modes))
	for m, md := range modes {
		var all, p50s []time.Duration
		var period time.Duration
		for _, r := range results[m] {
			all = append(all, r.gaps...)
			p50s = append(p50s, benchstack.Summarize(r.gaps).P50)
			period += r.period
		}
		s := benchstack.Summarize(all)
		sums[m] = s
		lo, hi := benchstack.MinMax(p50s)
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s–%s | %s |\n", md.name, md.what,
			benchstack.Ms(s.P50), benchstack.Ms(s.P90), benchstack.Ms(s.P99), benchstack.Ms(s.Max),
			benchstack.Ms(lo), benchstack.Ms(hi), benchstack.Ms(period/time.Duration(len(results[m]))))
	}
	base, subj, empty := sums[0], sums[1], sums[2]
	fmt.Fprintf(out, "\n| figure | measured | target | |\n|---|---|---|---|\n")
	fmt.Fprintf(out, "| subject p50 | %s ms | ≤ %s ms | %s |\n", benchstack.Ms(subj.P50), benchstack.Ms(targetP50), benchstack.Verdict(subj.P50 <= targetP50))
	fmt.Fprintf(out, "| subject p99 | %s ms | ≤ %s ms | %s |\n", benchstack.Ms(subj.P99), benchstack.Ms(targetP99), benchstack.Verdict(subj.P99 <= targetP99))
	fmt.Fprintf(out, "| subject/baseline p50 | %s | ≤ %.1f× | %s |\n", benchstack.Ratio(float64(subj.P50), float64(base.P50)),
		targetP50Ratio, benchstack.Verdict(float64(subj.P50) <= targetP50Ratio*float64(base.P50)))
	fmt.Fprintf(out, "| subject/baseline p99 | %s | | |\n", benchstack.Ratio(float64(subj.P99), float64(base.P99)))
	fmt.Fprintf(out, "| baseline/empty p50 (process step vs empty activity) | %s | | |\n", benchstack.Ratio(float64(base.P50), float64(empty.P50)))
	if len(sums) > 3 {
		miss := sums[3]
		fmt.Fprintf(out, "| cached miss − subject p50 (a lookup and a store per step) | %s ms | | |\n", benchstack.Ms(miss.P50-subj.P50))
	}

	fmt.Fprintf(out, "\nWhere the gap goes (p50 of each segment over all measured runs, ms; server event times vs the worker's process times, same clock):\n\n")
	fmt.Fprintf(out, "| mode | exit → ActivityTaskCompleted | → WorkflowTaskStarted | → WorkflowTaskCompleted | → next process start | history events/step | workflow tasks/step | activities/run |\n")
	fmt.Fprintf(out, "|---|---|---|---|---|---|---|---|\n")
	for m, md := range modes {
		var seg [4][]time.Duration
		var events, wfts, acts int
		for _, r := range results[m] {
			for k := range seg {
				seg[k] = append(seg[k], r.hist.seg[k]...)
			}
			events, wfts, acts = events+r.hist.events, wfts+r.hist.wfts, acts+r.hist.allActs
		}
		runs := float64(len(results[m]))
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %.2f | %.2f | %.0f |\n", md.name,
			benchstack.Ms(benchstack.Summarize(seg[0]).P50), benchstack.Ms(benchstack.Summarize(seg[1]).P50),
			benchstack.Ms(benchstack.Summarize(seg[2]).P50), benchstack.Ms(benchstack.Summarize(seg[3]).P50),
			float64(events)/runs/float64(n), float64(wfts)/runs/float64(n), float64(acts)/runs)
	}
	fmt.Fprintln(out)
}
