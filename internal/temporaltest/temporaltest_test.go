package temporaltest_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/internal/devstack"
	"github.com/atelier-ml/atelier/internal/temporaltest"
	"github.com/atelier-ml/atelier/workflows"
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
	for _, name := range []string{workflows.SAProject, workflows.SAPipeline, workflows.SAState} {
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
	// Unique per run so -count=N on the shared in-memory server still
	// finds exactly one match.
	project := fmt.Sprintf("x-%d-%d", os.Getpid(), time.Now().UnixNano())
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		TaskQueue: tq,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(workflows.SAProject).ValueSet(project),
			temporal.NewSearchAttributeKeyKeyword(workflows.SAPipeline).ValueSet("p"),
			temporal.NewSearchAttributeKeyKeyword(workflows.SAState).ValueSet(string(workflows.RunRunning)),
		),
	}, greetWorkflow, "list")
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	query := fmt.Sprintf("%s = %q", workflows.SAProject, project)
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

// TestActivityLatency guards TunedDynamicConfig: with the dev server's
// defaults an activity round trip is ~100 ms; tuned it is a few ms. The
// bound is loose (shared 2-core CI) but far below the untuned floor.
func TestActivityLatency(t *testing.T) {
	c := temporaltest.Client(t)
	tq := temporaltest.TaskQueue(t)
	startWorker(t, c, tq, []any{chainWorkflow}, []any{stampActivity})
	roundTrips(t, c, tq, 5) // warm up caches and pollers
	gaps := roundTrips(t, c, tq, 41)
	p50, p95 := pct(gaps, 0.5), pct(gaps, 0.95)
	t.Logf("activity round trip over %d: p50=%v p95=%v max=%v", len(gaps), p50, p95, gaps[len(gaps)-1])
	if p50 > 50*time.Millisecond {
		t.Errorf("activity round trip p50 = %v; TunedDynamicConfig not effective? (untuned ≈ 100ms)", p50)
	}
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
