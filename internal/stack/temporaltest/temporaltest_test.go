package temporaltest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/runstate"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/internal/stack/devstack"
	"github.com/atelier-ml/atelier/internal/stack/temporaltest"
)

func TestMain(m *testing.M) { temporaltest.Main(m) }

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestServerStarts(t *testing.T) {
	s := temporaltest.Server(t)
	if s.HostPort() == "" || s.Namespace() != devstack.DefaultNamespace {
		t.Fatalf("server: hostPort=%q namespace=%q", s.HostPort(), s.Namespace())
	}
	if s.UIURL() != "" {
		t.Errorf("headless test server has UI %q", s.UIURL())
	}
	// Same instance for every caller in the binary.
	if again := temporaltest.Server(t); again != s {
		t.Fatal("Server returned a second instance")
	}
	c := temporaltest.Client(t)
	if _, err := c.CheckHealth(ctxFor(t, 10*time.Second), &client.CheckHealthRequest{}); err != nil {
		t.Fatal(err)
	}
}

func TestNamespaceAndSearchAttributes(t *testing.T) {
	c := temporaltest.Client(t)
	ctx := ctxFor(t, 10*time.Second)
	ns := temporaltest.Server(t).Namespace()
	if _, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: ns}); err != nil {
		t.Fatalf("describe namespace %s: %v", ns, err)
	}
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{runstate.SAProject, runstate.SAPipeline, runstate.SAState, runstate.SACreatedBy, runstate.SASchedule} {
		if got := resp.GetCustomAttributes()[name]; got != enumspb.INDEXED_VALUE_TYPE_KEYWORD {
			t.Errorf("search attribute %s: type %v, want Keyword", name, got)
		}
	}
}

func greet(_ context.Context, name string) (string, error) { return "hello " + name, nil }

func greetWorkflow(ctx workflow.Context, name string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	var out string
	err := workflow.ExecuteActivity(ctx, greet, name).Get(ctx, &out)
	return out, err
}

func startWorker(t testing.TB, c client.Client, tq string, wfs []any, acts []any) {
	t.Helper()
	w := worker.New(c, tq, worker.Options{})
	for _, wf := range wfs {
		w.RegisterWorkflow(wf)
	}
	for _, a := range acts {
		w.RegisterActivity(a)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
}

func TestWorkflowWithActivity(t *testing.T) {
	c := temporaltest.Client(t)
	tq := temporaltest.TaskQueue(t)
	startWorker(t, c, tq, []any{greetWorkflow}, []any{greet})
	ctx := ctxFor(t, 30*time.Second)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: tq}, greetWorkflow, "atelier")
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := run.Get(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if got != "hello atelier" {
		t.Fatalf("got %q", got)
	}
}

func TestListBySearchAttribute(t *testing.T) {
	c := temporaltest.Client(t)
	tq := temporaltest.TaskQueue(t)
	startWorker(t, c, tq, []any{greetWorkflow}, []any{greet})
	ctx := ctxFor(t, 30*time.Second)
	// Unique per run so -count=N on the shared server still
	// finds exactly one match.
	project := fmt.Sprintf("x-%d-%d", os.Getpid(), time.Now().UnixNano())
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		TaskQueue: tq,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(runstate.SAProject).ValueSet(project),
			temporal.NewSearchAttributeKeyKeyword(runstate.SAPipeline).ValueSet("p"),
			temporal.NewSearchAttributeKeyKeyword(runstate.SAState).ValueSet(string(runstate.Running)),
		),
	}, greetWorkflow, "list")
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	query := fmt.Sprintf("%s = %q", runstate.SAProject, project)
	// Visibility is eventually consistent; poll briefly.
	var ids []string
	for ctx.Err() == nil {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err != nil {
			t.Fatalf("list %q: %v", query, err)
		}
		ids = ids[:0]
		for _, e := range resp.GetExecutions() {
			ids = append(ids, e.GetExecution().GetWorkflowId())
		}
		if len(ids) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(ids) != 1 || ids[0] != run.GetID() {
		t.Fatalf("list %q = %v, want [%s]", query, ids, run.GetID())
	}
}

// stampActivity returns when it ran, so the workflow can measure the gap
// between consecutive activities: one full activity round trip (complete →
// workflow task → schedule → dispatch → start).
func stampActivity(ctx context.Context) (int64, error) {
	_ = activity.GetInfo(ctx)
	return time.Now().UnixNano(), nil
}

func chainWorkflow(ctx workflow.Context, n int) ([]int64, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	stamps := make([]int64, 0, n)
	for range n {
		var ts int64
		if err := workflow.ExecuteActivity(ctx, stampActivity).Get(ctx, &ts); err != nil {
			return nil, err
		}
		stamps = append(stamps, ts)
	}
	return stamps, nil
}

// roundTrips runs one workflow of n sequential activities and returns the
// n-1 gaps between them.
func roundTrips(t testing.TB, c client.Client, tq string, n int) []time.Duration {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: tq}, chainWorkflow, n)
	if err != nil {
		t.Fatal(err)
	}
	var stamps []int64
	if err := run.Get(ctx, &stamps); err != nil {
		t.Fatal(err)
	}
	gaps := make([]time.Duration, 0, n-1)
	for i := 1; i < len(stamps); i++ {
		gaps = append(gaps, time.Duration(stamps[i]-stamps[i-1]))
	}
	slices.Sort(gaps)
	return gaps
}

func pct(sorted []time.Duration, p float64) time.Duration {
	return sorted[int(float64(len(sorted)-1)*p)]
}

// failFirstAttempt fails its first attempt, to exercise a retry backoff
// (a history timer).
func failFirstAttempt(ctx context.Context) error {
	if activity.GetInfo(ctx).Attempt == 1 {
		return errors.New("first attempt fails on purpose")
	}
	return nil
}

func retryWorkflow(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 10 * time.Millisecond},
	})
	if err := workflow.ExecuteActivity(ctx, failFirstAttempt).Get(ctx, nil); err != nil {
		return err
	}
	return workflow.Sleep(ctx, 10*time.Millisecond)
}

// TestRetryAndTimer checks that activity retries and durable timers work on
// the tuned server. Its duration is logged, not asserted (a shared machine
// makes timed assertions flaky): untuned, a 10ms retry backoff and a 10ms
// Sleep each take ~1s; tuned, the workflow takes ~50ms. The figures that
// matter are measured by bench/ and BenchmarkActivityRoundTrip.
func TestRetryAndTimer(t *testing.T) {
	c := temporaltest.Client(t)
	tq := temporaltest.TaskQueue(t)
	startWorker(t, c, tq, []any{retryWorkflow}, []any{failFirstAttempt})
	ctx := ctxFor(t, 30*time.Second)
	var best time.Duration
	for i := range 3 { // best of 3: robust against a noisy neighbour
		start := time.Now()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: tq}, retryWorkflow)
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); i == 0 || d < best {
			best = d
		}
	}
	t.Logf("retry after 10ms backoff + Sleep(10ms): best of 3 = %v", best)
}

// BenchmarkActivityRoundTrip reports the cost of one activity round trip
// inside a workflow on the tuned dev server (ns/op = one activity).
func BenchmarkActivityRoundTrip(b *testing.B) {
	c := temporaltest.Client(b)
	tq := temporaltest.TaskQueue(b)
	startWorker(b, c, tq, []any{chainWorkflow}, []any{stampActivity})
	roundTrips(b, c, tq, 3)
	b.ResetTimer()
	gaps := roundTrips(b, c, tq, b.N+1)
	b.StopTimer()
	if len(gaps) > 0 {
		b.ReportMetric(float64(pct(gaps, 0.5).Microseconds())/1000, "p50-ms")
	}
}
