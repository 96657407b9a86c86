package workflows_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/examples/gopipeline"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// TestReplayRecordedHistories replays histories recorded from a real server
// (see integration/record_test.go). A failure means a workflow change is not
// deterministic for runs already in flight: guard it with workflow.GetVersion
// rather than re-recording.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded histories in testdata (%v)", err)
	}
	// Histories recorded with their workflow ID replay under it: GPU
	// workload IDs derive from it (older ones do not need it).
	ids := map[string]string{}
	if b, err := os.ReadFile("testdata/workflow-ids.json"); err == nil {
		if err := json.Unmarshal(b, &ids); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if name == "workflow-ids" {
			continue
		}
		// Traced: with the OpenTelemetry interceptor workers install when
		// tracing is on, which must add no command either.
		for _, traced := range []bool{false, true} {
			sub := name
			if traced {
				sub += "/traced"
			}
			t.Run(sub, func(t *testing.T) {
				r := newReplayer(t, traced)
				fh, err := os.Open(f)
				if err != nil {
					t.Fatal(err)
				}
				defer fh.Close()
				h, err := client.HistoryFromJSON(fh, client.HistoryJSONOptions{})
				if err != nil {
					t.Fatal(err)
				}
				opts := worker.ReplayWorkflowHistoryOptions{}
				if id := ids[name]; id != "" {
					opts.OriginalExecution = workflow.Execution{ID: id, RunID: h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetOriginalExecutionRunId()}
				}
				if err := r.ReplayWorkflowHistoryWithOptions(nil, h, opts); err != nil {
					t.Fatalf("replay %s: %v", f, err)
				}
			})
		}
	}
}

// newReplayer is a replayer of every Atelier workflow, with the tracing
// interceptor of a traced worker when traced.
func newReplayer(t *testing.T, traced bool) worker.WorkflowReplayer {
	t.Helper()
	var opts worker.WorkflowReplayerOptions
	if traced {
		tr, err := telemetry.NewTracing(t.Context(), telemetry.WorkerService, tracetest.NewInMemoryExporter())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Shutdown() })
		is, err := tr.TemporalInterceptors()
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range is {
			opts.Interceptors = append(opts.Interceptors, i.(interceptor.WorkerInterceptor))
		}
		if len(opts.Interceptors) == 0 {
			t.Fatal("tracing is on but installs no worker interceptor")
		}
	}
	r, err := worker.NewWorkflowReplayerWithOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	workflows.Register(r, gopipeline.Pipeline, gopipeline.CleanupPipeline, gopipeline.ChainPipeline, gopipeline.FanOutPipeline)
	return r
}

// TestReplayCatchesAnUnguardedChange proves the replay test has teeth: the
// same workflow with one extra command (as an unguarded change would add)
// must not replay a recorded history.
func TestReplayCatchesAnUnguardedChange(t *testing.T) {
	changed := func(ctx workflow.Context, in workflows.PipelineInput) error {
		if err := workflow.Sleep(ctx, time.Second); err != nil { // the "change"
			return err
		}
		_, err := workflows.PipelineWorkflow(ctx, in)
		return err
	}
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: runstate.PipelineWorkflowName})
	// The replayer reports a mismatch as an error, or panics on some
	// (an event with no matching command): either is a caught change.
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("nondeterminism: replay panicked: %v", p)
			}
		}()
		return r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/pipeline-succeeded.json")
	}()
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "nondetermin") {
		t.Fatalf("replay of a changed workflow: %v, want a nondeterminism error", err)
	}
}
