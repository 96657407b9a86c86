package integration

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/examples/gopipeline"
)

// The example.FanOut Go pipeline (Run.ForEach, Run.Reduce) through REST
// on the real stack: 1,200 real processes run wide, in batch workflows,
// their records in Postgres and paged by the items endpoint; the reducer
// reads the outputs over Postgres. With ATELIER_RECORD_HISTORIES=1 it
// records v6-go-foreach and its first batch.
func TestGoForEachOnRealStack(t *testing.T) {
	if testing.Short() {
		t.Skip("1,200 local processes")
	}
	s := newStack(t, stackOptions{concurrency: 100}) // its worker serves the examples

	id := s.startRun(gen.CreateRunRequest{Workflow: ptrTo(gopipeline.FanOutName), Input: goInput(t, gopipeline.FanOutInput{Items: 1200, Parallelism: 100})})
	r := s.waitTerminal(id, 5*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	var sum float64
	for k := 0; k < 1200; k++ {
		sum += float64(k * k)
	}
	assert.Equal(t, map[string]any{"items": 1200.0, "sum": sum, "wide": true}, r.Status.Result)
	sq := stepByName(r, "square")
	require.NotNil(t, sq.Wide)
	assert.Equal(t, gen.ItemCounts{Succeeded: 1200}, sq.Wide.Counts)
	items, _ := s.listItems(s.client(), id, "square", gen.StepStateSUCCEEDED, 1000)
	require.Len(t, items, 1200)
	assert.Equal(t, map[string]any{"v": 49.0}, items[7].Outputs)

	if os.Getenv("ATELIER_RECORD_HISTORIES") != "" {
		time.Sleep(500 * time.Millisecond) // the final mirror's completion
		recordHistory(t, s, "v6-go-foreach", id)
		recordHistory(t, s, "v6-go-foreach-batch", id+".square.batch-0")
	}
}
