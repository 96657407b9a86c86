package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"

	"github.com/atelier-ml/atelier/examples/gopipeline"
	"github.com/atelier-ml/atelier/workflows"
)

// TestRecordHistories refreshes the workflow histories that
// workflows/replay_test.go replays in every CI run. Run it deliberately when
// a workflow change is meant to be compatible, never to paper over a replay
// failure (that needs a workflow.GetVersion guard):
//
//	ATELIER_RECORD_HISTORIES=1 go test ./integration -run TestRecordHistories
func TestRecordHistories(t *testing.T) {
	if os.Getenv("ATELIER_RECORD_HISTORIES") == "" {
		t.Skip("set ATELIER_RECORD_HISTORIES=1 to re-record workflows/testdata histories")
	}
	s := newStack(t)
	dir := stepScratchDir(t)
	s.createPipeline("train-evaluate", string(readExample(t)))
	s.createPipeline("retry-fail", `
steps:
  - name: flaky
    retries: {limit: 1, backoff: 1s}
    container: {command: ["sh", "-c", "exit 3"]}
  - name: never
    dependsOn: [flaky]
    container: {command: ["true"]}
`)
	s.createPipeline("blocking", blockingPipeline(dir))

	record := func(name, id string) {
		iter := s.temporal.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		h := &historypb.History{}
		for iter.HasNext() {
			ev, err := iter.Next()
			require.NoError(t, err)
			h.Events = append(h.Events, ev)
		}
		b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(h)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join("..", "workflows", "testdata", name+".json"), b, 0o644))
	}

	ok := s.startRun(map[string]any{"pipeline": "train-evaluate"})
	failed := s.startRun(map[string]any{"pipeline": "retry-fail"})
	goRun := s.startRun(map[string]any{"workflow": gopipeline.Name, "input": gopipeline.Input{Dataset: "iris", LearningRates: []float64{0.01, 0.1}, Threshold: 0.5}})
	cancelled := s.startRun(map[string]any{"pipeline": "blocking"})
	waitFile(t, filepath.Join(dir, "pid"), 30*time.Second)
	require.Equal(t, 202, s.do("POST", s.path("/runs/%s/cancel", cancelled), map[string]any{"reason": "recording"}, nil))

	for name, id := range map[string]string{"pipeline-succeeded": ok, "pipeline-failed": failed, "go-pipeline": goRun, "pipeline-cancelled": cancelled} {
		r := s.waitTerminal(id, 60*time.Second)
		t.Logf("%s: %s", name, r.State)
		require.NotEqual(t, workflows.RunRunning, r.State)
		// Let the final mirror activity's completion land in history.
		time.Sleep(500 * time.Millisecond)
		record(name, id)
	}
	fmt.Println("recorded histories in workflows/testdata")
}
