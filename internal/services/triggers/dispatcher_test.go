package triggers

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// fakeStore holds one pipeline version and the runs created, keyed by
// idempotency key as the catalogue does; claims hand out queued firings.
type fakeStore struct {
	queue   []catalog.ClaimedFiring
	results []catalog.FiringResult
	runs    map[string]catalog.Run // by idempotency key
	creates int
}

func (f *fakeStore) ClaimTriggerFirings(_ context.Context, _ string, _, _ time.Time, max int) ([]catalog.ClaimedFiring, error) {
	n := min(max, len(f.queue))
	out := f.queue[:n]
	f.queue = f.queue[n:]
	return out, nil
}

func (f *fakeStore) RecordTriggerFiring(_ context.Context, r catalog.FiringResult) error {
	f.results = append(f.results, r)
	return nil
}

func (f *fakeStore) DeleteFinishedTriggerFirings(context.Context, time.Time, int) (int64, error) {
	return 0, nil
}

func (f *fakeStore) GetPipeline(_ context.Context, _, name string) (catalog.Pipeline, error) {
	if name != "train" {
		return catalog.Pipeline{}, catalog.ErrNotFound
	}
	return catalog.Pipeline{Name: name, LatestVersion: 2}, nil
}

func (f *fakeStore) GetPipelineVersion(_ context.Context, _, name string, v int) (catalog.PipelineVersion, error) {
	spec := `{"params":[{"name":"dataset","type":"string"},{"name":"lr","type":"number","default":0.1}],"steps":[{"name":"fit","container":{"command":["true"]}}]}`
	return catalog.PipelineVersion{Pipeline: name, Version: v, Spec: json.RawMessage(spec)}, nil
}

func (f *fakeStore) CreateRun(_ context.Context, r catalog.Run) (catalog.Run, bool, error) {
	f.creates++
	if old, ok := f.runs[r.IdempotencyKey]; ok {
		return old, false, nil
	}
	f.runs[r.IdempotencyKey] = r
	return r, true, nil
}

type fakeEngine struct {
	fails   int
	started []runclient.StartRequest
}

func (e *fakeEngine) StartRun(_ context.Context, r runclient.StartRequest) error {
	e.started = append(e.started, r)
	if e.fails > 0 {
		e.fails--
		return runclient.ErrStartUncertain
	}
	return nil
}

func firing(id string, params map[string]any) catalog.ClaimedFiring {
	return catalog.ClaimedFiring{
		ID: id, TriggerID: "trg-1", Trigger: "retrain", Kind: catalog.TriggerRun, Project: "p", Source: "up-1",
		Payload: json.RawMessage(`{"runId":"up-1","params":{"lr":0.5},"steps":{"make":{"state":"SUCCEEDED","outputs":{"path":"/d"}}}}`),
		Attempt: 1, Pipeline: "train", Params: params,
	}
}

// An unconfirmed start is retried, and the retry starts the same run
// (found by the firing's idempotency key), never a second; bad params and
// a missing pipeline fail the firing at once with the reason.
func TestDispatcherStartsEachFiringOnce(t *testing.T) {
	st := &fakeStore{runs: map[string]catalog.Run{}}
	eng := &fakeEngine{fails: 1}
	d := New(st, eng, time.Now, zap.NewNop(), Options{TaskQueue: "q"})
	good := firing("fir-a", map[string]any{"dataset": "{{ upstream.steps.make.outputs.path }}", "lr": "{{ upstream.params.lr }}"})
	st.queue = []catalog.ClaimedFiring{good}
	if _, err := d.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(st.results) != 1 || st.results[0].State != catalog.FiringPending || !strings.Contains(st.results[0].Error, "not confirmed") {
		t.Fatalf("first attempt: %+v", st.results)
	}
	if !st.results[0].NextAttemptAt.After(time.Now()) {
		t.Fatal("no backoff")
	}
	good.Attempt = 2
	st.queue = []catalog.ClaimedFiring{good}
	if _, err := d.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(st.results) != 2 || st.results[1].State != catalog.FiringStarted {
		t.Fatalf("second attempt: %+v", st.results[1])
	}
	if p := st.results[1].Params; p["dataset"] != "/d" || p["lr"] != 0.5 {
		t.Fatalf("the started run's params are recorded on the firing: %+v", p)
	}
	if len(st.runs) != 1 || len(eng.started) != 2 || eng.started[0].RunID != eng.started[1].RunID || st.results[1].RunID != eng.started[0].RunID {
		t.Fatalf("runs %d, starts %+v, result %+v", len(st.runs), eng.started, st.results[1])
	}
	run := st.runs["fir-a"]
	if run.CreatedBy != "trigger:retrain" || run.Version != 2 || run.State != runstate.Pending || eng.started[0].TaskQueue != "q" {
		t.Fatalf("run %+v", run)
	}
	var in struct {
		Params map[string]any `json:"params"`
	}
	if err := json.Unmarshal(run.Input, &in); err != nil || in.Params["dataset"] != "/d" || in.Params["lr"] != 0.5 {
		t.Fatalf("input %s (%v)", run.Input, err)
	}

	st.queue = []catalog.ClaimedFiring{
		firing("fir-b", map[string]any{"dataset": "{{ upstream.outputs.x }}"}),
		firing("fir-c", map[string]any{"lr": 1}),
		func() catalog.ClaimedFiring {
			f := firing("fir-d", map[string]any{"dataset": "x"})
			f.Pipeline = "gone"
			return f
		}(),
	}
	if _, err := d.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"rendering params", `params for train version 2`, `pipeline "gone" not found`} {
		r := st.results[2+i]
		if r.State != catalog.FiringFailed || !strings.Contains(r.Error, want) {
			t.Errorf("%s: %+v, want failed with %q", r.ID, r, want)
		}
	}
	if len(st.runs) != 1 {
		t.Fatalf("failed firings created runs: %d", len(st.runs))
	}
}
