// Command fanout measures a wide forEach: N items of a no-op step through
// Atelier's pipeline workflow (batch child workflows, item records in
// Postgres) against a hand-written Temporal sliding-window fan-out running
// the same activity with the same batch sizes and windows, on the same dev
// server and worker, repetitions interleaved. Optionally one run of a much
// larger list (-big), reporting where the time goes. See bench/doc.go.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/foreach"
	"github.com/atelier-ml/atelier/activities/mirror"
	"github.com/atelier-ml/atelier/bench/internal/benchstack"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/workflows"
)

const (
	project          = "bench"
	pipelineName     = "fanout"
	baselineWorkflow = "bench.FanOut"
	partitionWF      = "bench.FanOutPartition"
	// queue is the task queue of this benchmark's own worker, whose
	// container activity does nothing (no process): the figures are those
	// of the orchestration.
	queue = "bench-fanout-noop"
)

// Targets printed next to the figures (never asserted).
const (
	targetWall  = 60 * time.Second
	targetRatio = 1.3
)

func main() {
	n := flag.Int("n", 10_000, "items of the measured forEach")
	par := flag.Int("p", 1000, "forEach parallelism (items in flight)")
	r := flag.Int("r", 3, "measured repetitions per mode, interleaved, after one warm-up each")
	big := flag.Int("big", 0, "then run one forEach of this many items (e.g. 100000) through Atelier alone")
	quick := flag.Bool("quick", false, "smoke run: -n 2000 -r 1 unless given")
	verbose := flag.Bool("v", false, "stack logs at info level")
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["n"] {
			*n = 2000
		}
		if !set["r"] {
			*r = 1
		}
	}
	if *n <= pipeline.WideThreshold || *n > pipeline.MaxForEachItems || *par < 1 || *par > pipeline.MaxParallelism || *r < 1 ||
		(*big != 0 && (*big <= pipeline.WideThreshold || *big > pipeline.MaxForEachItems)) {
		fmt.Fprintf(os.Stderr, "fanout: need %d < -n, -big <= %d (a wide forEach), 1 <= -p <= %d, -r >= 1\n",
			pipeline.WideThreshold, pipeline.MaxForEachItems, pipeline.MaxParallelism)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *n, *par, *r, *big, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

// sample is one measured run.
type sample struct {
	wall      time.Duration
	serverCPU time.Duration // the Temporal dev server's CPU time
	selfCPU   time.Duration // this process: worker, activities, client
	events    int           // history events of the run and its children
	workflows int
}

type mode struct {
	name, what string
	run        func(ctx context.Context, st *benchstack.Stack, id string, n, par int) error
}

func run(ctx context.Context, n, par, reps, big int, verbose bool) error {
	opts := benchstack.Options{Name: "fanout"}
	if verbose {
		opts.LogLevel = "info"
	}
	st, err := benchstack.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Store.CreateProject(ctx, catalog.Project{Name: project}); err != nil {
		return fmt.Errorf("create project: %w", err)
	}
	stopWorkers, err := startWorkers(st)
	if err != nil {
		return err
	}
	defer stopWorkers()

	modes := []mode{
		{"baseline", fmt.Sprintf("`%s`: hand-written sliding window of partition child workflows, each a sliding window of activities with continue-as-new; plain activity options (StartToCloseTimeout 1m)", baselineWorkflow), runBaseline(false)},
		{"subject", fmt.Sprintf("`%s`: one forEach step, items `0..%d`, parallelism %d", runstate.PipelineWorkflowName, n-1, par), runPipeline},
		{"baseline+step-options", fmt.Sprintf("`%s` with the activity options of an Atelier step (10 s heartbeat timeout, 24 h + 1 m start-to-close, wait for cancellation, retry policy)", baselineWorkflow), runBaseline(true)},
		{"subject-go", fmt.Sprintf("`%s`: a native Go pipeline whose one step is `Run.ForEach` over `0..%d`, parallelism %d", goFanOutWorkflow, n-1, par), runGoForEach},
	}
	results := make([][]sample, len(modes))
	for rep := 0; rep <= reps; rep++ { // rep 0 is the warm-up
		for m, md := range modes {
			label := fmt.Sprintf("rep %d/%d", rep, reps)
			if rep == 0 {
				label = "warm-up"
			}
			s, err := measure(ctx, st, md, n, par, rep)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", md.name, label, err)
			}
			benchstack.Logf("%-9s %-8s %s (%.0f items/s), server CPU %s, worker CPU %s, %d events in %d workflows", md.name, label,
				s.wall.Round(time.Millisecond), float64(n)/s.wall.Seconds(), s.serverCPU.Round(time.Millisecond),
				s.selfCPU.Round(time.Millisecond), s.events, s.workflows)
			if rep > 0 {
				results[m] = append(results[m], s)
			}
		}
	}
	var bigRes *sample
	if big > 0 {
		benchstack.Logf("one run of %d items through %s…", big, runstate.PipelineWorkflowName)
		s, err := measure(ctx, st, modes[1], big, par, 1)
		if err != nil {
			return fmt.Errorf("%d items: %w", big, err)
		}
		benchstack.Logf("%d items: %s", big, s.wall.Round(time.Millisecond))
		bigRes = &s
	}
	report(st, modes, results, n, par, reps, big, bigRes)
	return nil
}

func measure(ctx context.Context, st *benchstack.Stack, md mode, n, par, rep int) (sample, error) {
	id := fmt.Sprintf("fanout-%s-%d-%d", md.name, rep, time.Now().UnixNano())
	rctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	srv0, self0 := procCPU(st.Temporal.Pid()), selfCPU()
	t0 := time.Now()
	if err := md.run(rctx, st, id, n, par); err != nil {
		return sample{}, err
	}
	s := sample{wall: time.Since(t0), serverCPU: procCPU(st.Temporal.Pid()) - srv0, selfCPU: selfCPU() - self0}
	size, _, _ := workflows.WidePlan(n, par)
	var children []string
	for k := 0; k*size < n; k++ {
		if md.name == "subject" || md.name == "subject-go" {
			children = append(children, fmt.Sprintf("%s.fan.batch-%d", id, k))
		} else {
			children = append(children, fmt.Sprintf("%s.p%d", id, k)) // both baselines
		}
	}
	s.events, s.workflows = historySize(rctx, st.Client, id, children)
	return s, nil
}

// --- the worker: no-op container activity, Atelier's workflows, both modes ---

// startWorkers runs this benchmark's worker on queue (workflows, the no-op
// container activity, the baseline) and its control worker (the mirror and
// the wide forEach activities, as internal/process/app does), with the same
// options for both modes.
func startWorkers(st *benchstack.Stack) (func(), error) {
	opts := worker.Options{
		MaxConcurrentActivityExecutionSize:     4000,
		MaxConcurrentWorkflowTaskExecutionSize: 1000,
		MaxConcurrentActivityTaskPollers:       8,
		MaxConcurrentWorkflowTaskPollers:       8,
	}
	w := worker.New(st.Client, queue, opts)
	workflows.Register(w)
	w.RegisterActivityWithOptions(noop, activity.RegisterOptions{Name: activities.RunContainerName})
	w.RegisterWorkflowWithOptions(fanOut, workflow.RegisterOptions{Name: baselineWorkflow})
	w.RegisterWorkflowWithOptions(goFanOut, workflow.RegisterOptions{Name: goFanOutWorkflow})
	w.RegisterWorkflowWithOptions(fanOutPartition, workflow.RegisterOptions{Name: partitionWF})
	control := worker.New(st.Client, activities.ControlTaskQueue(queue), worker.Options{
		MaxConcurrentActivityExecutionSize: activities.ControlConcurrency, DisableWorkflowWorker: true,
	})
	mirror.New(st.Store, nil).Register(control)
	foreach.New(st.Store, nil).Register(control)
	if err := control.Start(); err != nil {
		return nil, err
	}
	if err := w.Start(); err != nil {
		control.Stop()
		return nil, err
	}
	return func() { w.Stop(); control.Stop() }, nil
}

// noop is the step activity of both modes: it does nothing and reports
// success, as a container step that ran `true` would, without the process.
func noop(_ context.Context, req activities.ContainerRequest) (activities.ContainerResult, error) {
	now := time.Now()
	return activities.ContainerResult{StartedAt: now, FinishedAt: now}, nil
}

// --- the subject: Atelier's declarative pipeline workflow ---

func runPipeline(ctx context.Context, st *benchstack.Stack, id string, n, par int) error {
	p := pipeline.Spec{Name: pipelineName, Steps: []pipeline.Step{{
		Name:      "fan",
		ForEach:   &pipeline.ForEach{Items: []byte(strconv.Quote(fmt.Sprintf("0..%d", n-1))), Parallelism: par},
		Container: &pipeline.Container{Command: []string{"true"}},
	}}}
	if err := pipeline.Validate(&p, pipeline.ValidateOptions{}); err != nil {
		return fmt.Errorf("pipeline spec: %w", err)
	}
	in := workflows.PipelineInput{RunID: id, Project: project, Pipeline: pipelineName, Version: 1, Spec: p}
	wr, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, runstate.PipelineWorkflowName, in)
	if err != nil {
		return err
	}
	if err := wr.Get(ctx, nil); err != nil {
		return err
	}
	v, err := st.Client.QueryWorkflow(ctx, id, "", runstate.QueryStatus)
	if err != nil {
		return fmt.Errorf("query status: %w", err)
	}
	var status runstate.Status
	if err := v.Get(&status); err != nil {
		return err
	}
	if w := status.Steps[0].Wide; status.State != runstate.Succeeded || w == nil || w.Counts.Succeeded != n {
		return fmt.Errorf("run %s ended %s (%s): %+v", id, status.State, status.Error, status.Steps[0].Wide)
	}
	return nil
}

// --- the Go API's subject: Run.ForEach in a native Go pipeline ---

// goFanOutWorkflow is the benchmark's Go pipeline: Run.ForEach over
// 0..n-1, which takes the declarative forEach's path (wide past 1,000).
const goFanOutWorkflow = "bench.GoFanOut"

type goFanInput struct{ N, Par int }

func goFanOut(ctx workflow.Context, in goFanInput) (int, error) {
	run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{Project: project, Pipeline: goFanOutWorkflow})
	if err != nil {
		return 0, err
	}
	res, err := run.ForEach(ctx, "fan", workflows.ForEachItems{Items: fmt.Sprintf("0..%d", in.N-1), Parallelism: in.Par},
		pipeline.Container{Command: []string{"true"}}).Get(ctx)
	return res.Items, run.End(res.Items, err)
}

func runGoForEach(ctx context.Context, st *benchstack.Stack, id string, n, par int) error {
	wr, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, goFanOutWorkflow, goFanInput{N: n, Par: par})
	if err != nil {
		return err
	}
	var got int
	if err := wr.Get(ctx, &got); err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("run %s: %d items, want %d", id, got, n)
	}
	return nil
}

// --- the baseline: a hand-written sliding-window fan-out ---

type fanInput struct {
	N, BatchSize, PerBatch, Window int
	StepOptions                    bool
}

type partitionInput struct {
	Start, End, Next, PerBatch, Done int
	StepOptions                      bool
}

func runBaseline(stepOptions bool) func(ctx context.Context, st *benchstack.Stack, id string, n, par int) error {
	return func(ctx context.Context, st *benchstack.Stack, id string, n, par int) error {
		size, per, window := workflows.WidePlan(n, par)
		wr, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, baselineWorkflow,
			fanInput{N: n, BatchSize: size, PerBatch: per, Window: window, StepOptions: stepOptions})
		if err != nil {
			return err
		}
		var done int
		if err := wr.Get(ctx, &done); err != nil {
			return err
		}
		if done != n {
			return fmt.Errorf("baseline ran %d of %d items", done, n)
		}
		return nil
	}
}

// fanOut is the parent, as in the samples-go batch samples: partitions of
// BatchSize items as child workflows, Window of them at a time.
func fanOut(ctx workflow.Context, in fanInput) (int, error) {
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	active, done, k := 0, 0, 0
	var failed error
	for start := 0; start < in.N; start += in.BatchSize {
		_ = workflow.Await(ctx, func() bool { return active < in.Window })
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID:        fmt.Sprintf("%s.p%d", id, k),
			ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
		})
		f := workflow.ExecuteChildWorkflow(cctx, partitionWF, partitionInput{Start: start, End: min(start+in.BatchSize, in.N), Next: start, PerBatch: in.PerBatch, StepOptions: in.StepOptions})
		active++
		k++
		workflow.Go(ctx, func(g workflow.Context) {
			var n int
			if err := f.Get(g, &n); err != nil && failed == nil {
				failed = err
			}
			done += n
			active--
		})
	}
	_ = workflow.Await(ctx, func() bool { return active == 0 })
	return done, failed
}

// fanOutPartition runs items [Next, End) PerBatch at a time, continuing as
// new before its history grows large.
func fanOutPartition(ctx workflow.Context, in partitionInput) (int, error) {
	opts := workflow.ActivityOptions{StartToCloseTimeout: time.Minute}
	if in.StepOptions {
		// What workflows.stepActivityOptions sets for a step attempt.
		opts = workflow.ActivityOptions{
			StartToCloseTimeout: pipeline.DefaultStepTimeout + time.Minute,
			HeartbeatTimeout:    10 * time.Second,
			WaitForCancellation: true,
			RetryPolicy: &temporal.RetryPolicy{
				InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 10,
				NonRetryableErrorTypes: []string{activities.ErrTypeStepFailed, activities.ErrTypeStepTimeout, activities.ErrTypeInvalidStep, activities.ErrTypeBadOutputs},
			},
		}
	}
	ctx = workflow.WithActivityOptions(ctx, opts)
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	active := 0
	var failed error
	next := in.Next
	for ; next < in.End; next++ {
		_ = workflow.Await(ctx, func() bool { return active < in.PerBatch })
		if workflow.GetInfo(ctx).GetCurrentHistoryLength() >= 10_000 {
			break
		}
		k := next
		req := activities.ContainerRequest{Project: project, RunID: id, Step: "fan", Item: &k, Attempt: 1,
			Command: []string{"true"}, Timeout: pipeline.DefaultStepTimeout}
		f := workflow.ExecuteActivity(ctx, activities.RunContainerName, req)
		active++
		workflow.Go(ctx, func(g workflow.Context) {
			var res activities.ContainerResult
			if err := f.Get(g, &res); err != nil && failed == nil {
				failed = err
			}
			in.Done++
			active--
		})
	}
	_ = workflow.Await(ctx, func() bool { return active == 0 })
	if failed != nil {
		return in.Done, failed
	}
	if next < in.End {
		in.Next = next
		return 0, workflow.NewContinueAsNewError(ctx, partitionWF, in)
	}
	return in.Done, nil
}

// --- measurements ---

// procCPU is a process's user+system CPU time (Linux /proc; 0 elsewhere).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) start after ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// historySize adds up the history events of a run and of its batch (or
// partition) workflows, by their deterministic IDs (the latest run of
// each: none continues as new at these sizes).
func historySize(ctx context.Context, c client.Client, id string, children []string) (events, wfs int) {
	for _, wid := range append([]string{id}, children...) {
		d, err := c.DescribeWorkflowExecution(ctx, wid, "")
		if err != nil {
			continue
		}
		events += int(d.WorkflowExecutionInfo.GetHistoryLength())
		wfs++
	}
	return events, wfs
}

func report(st *benchstack.Stack, modes []mode, results [][]sample, n, par, reps, big int, bigRes *sample) {
	out := os.Stdout
	fmt.Fprintf(out, "## bench/fanout: a wide forEach of %d no-op items\n\n", n)
	st.Info.Print(out)
	size, per, window := workflows.WidePlan(n, par)
	fmt.Fprintf(out, "N=%d items, parallelism %d: batches of %d items, %d per batch at once, %d batches at once (both modes). The step activity does nothing (`%s` registered as a no-op on the benchmark's worker; no process). R=%d measured runs per mode, interleaved after one warm-up each. Wall time from start to the workflow's result.\n\n",
		n, par, size, per, window, activities.RunContainerName, reps)
	fmt.Fprintf(out, "| mode | what | median s | min–max s | items/s (median) | server CPU s (median) | worker CPU s (median) | history events | workflows |\n")
	fmt.Fprintf(out, "|---|---|---|---|---|---|---|---|---|\n")
	med := make([]time.Duration, len(modes))
	for m, md := range modes {
		var walls, srv, self []time.Duration
		for _, s := range results[m] {
			walls = append(walls, s.wall)
			srv = append(srv, s.serverCPU)
			self = append(self, s.selfCPU)
		}
		slices.Sort(walls)
		slices.Sort(srv)
		slices.Sort(self)
		med[m] = walls[len(walls)/2]
		last := results[m][len(results[m])-1]
		fmt.Fprintf(out, "| %s | %s | %.2f | %.2f–%.2f | %.0f | %.1f | %.1f | %d | %d |\n", md.name, md.what,
			med[m].Seconds(), walls[0].Seconds(), walls[len(walls)-1].Seconds(), float64(n)/med[m].Seconds(),
			srv[len(srv)/2].Seconds(), self[len(self)/2].Seconds(), last.events, last.workflows)
	}
	fmt.Fprintf(out, "\n| figure | measured | target | |\n|---|---|---|---|\n")
	fmt.Fprintf(out, "| subject median wall time | %.2f s | < %s | %s |\n", med[1].Seconds(), targetWall, benchstack.Verdict(med[1] < targetWall))
	fmt.Fprintf(out, "| subject / baseline (medians) | %s | ≤ %.1f× | %s |\n", benchstack.Ratio(float64(med[1]), float64(med[0])),
		targetRatio, benchstack.Verdict(float64(med[1]) <= targetRatio*float64(med[0])))
	if len(med) > 2 {
		fmt.Fprintf(out, "| subject / baseline+step-options (medians) | %s | | |\n", benchstack.Ratio(float64(med[1]), float64(med[2])))
	}
	if len(med) > 3 {
		fmt.Fprintf(out, "| subject-go (Run.ForEach) / baseline (medians) | %s | ≤ %.1f× | %s |\n", benchstack.Ratio(float64(med[3]), float64(med[0])),
			targetRatio, benchstack.Verdict(float64(med[3]) <= targetRatio*float64(med[0])))
		fmt.Fprintf(out, "| subject-go / subject (medians) | %s | | |\n", benchstack.Ratio(float64(med[3]), float64(med[1])))
	}
	if bigRes != nil {
		fmt.Fprintf(out, "\nOne run of %d items (subject only, same settings): **%.1f s** (%.0f items/s); Temporal server CPU %.1f s, this process (worker, Postgres writes' client side) %.1f s, over %.1f s of wall time on %d cores; %d history events in %d workflows.\n",
			big, bigRes.wall.Seconds(), float64(big)/bigRes.wall.Seconds(), bigRes.serverCPU.Seconds(), bigRes.selfCPU.Seconds(),
			bigRes.wall.Seconds(), st.Info.NumCPU, bigRes.events, bigRes.workflows)
	}
}
