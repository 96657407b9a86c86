package api

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// finishedRun is a SUCCEEDED run of "train" with params and one step's
// outputs and metrics.
func finishedRun(id string, params map[string]any, outputs map[string]any, m *runstate.Metrics) catalog.Run {
	st := runstate.Status{RunID: id, Project: "alpha", Pipeline: "train", Version: 1, Workflow: "atelier.Pipeline",
		State: runstate.Succeeded, Seq: 9, Params: params,
		Steps: []runstate.StepStatus{{Name: "fit", Kind: "container", State: runstate.StepSucceeded, Outputs: outputs, Metrics: m}}}
	return catalog.Run{ID: id, Project: "alpha", Pipeline: "train", Version: 1, Workflow: "atelier.Pipeline",
		State: runstate.Succeeded, CreatedAt: t0, UpdatedAt: t0, CreatedBy: "ci", Status: &st}
}

func TestCompareRuns(t *testing.T) {
	h := newHarness(t)
	h.cat.setRun(finishedRun(runID1, map[string]any{"lr": 0.1, "epochs": 3.0}, map[string]any{"model": "a"},
		&runstate.Metrics{Scalars: map[string]float64{"accuracy": 0.91, "f1": 0.5}, Series: map[string][]float64{"loss": {0.9, 0.4}}}))
	h.cat.setRun(finishedRun(runID2, map[string]any{"lr": 0.2, "epochs": 3.0}, map[string]any{"model": "b"},
		&runstate.Metrics{Scalars: map[string]float64{"accuracy": 0.95, "f1": 0.5}}))

	var got gen.RunComparison
	r := h.do("GET", "/v1/projects/alpha/compare?runs="+runID2+"&runs="+runID1, h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	r.json(t, &got)
	if len(got.Runs) != 2 || got.Runs[0].Id != runID2 || got.Runs[1].Id != runID1 || got.Runs[0].State != gen.RunStateSUCCEEDED {
		t.Fatalf("runs %+v", got.Runs)
	}
	wantParams := []gen.ComparedValue{
		{Name: "epochs", Values: []any{3.0, 3.0}},
		{Name: "lr", Values: []any{0.2, 0.1}, Differs: true},
	}
	if diff := cmp.Diff(wantParams, got.Params); diff != "" {
		t.Errorf("params (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]gen.ComparedValue{{Step: ptr("fit"), Name: "model", Values: []any{"b", "a"}, Differs: true}}, got.Outputs); diff != "" {
		t.Errorf("outputs (-want +got):\n%s", diff)
	}
	wantMetrics := []gen.ComparedMetric{
		{Step: "fit", Name: "accuracy", Values: []*float64{ptr(0.95), ptr(0.91)}, Differs: true, Best: ptr(0), Worst: ptr(1), Goal: gen.Maximize},
		{Step: "fit", Name: "f1", Values: []*float64{ptr(0.5), ptr(0.5)}, Goal: gen.Maximize},
	}
	if diff := cmp.Diff(wantMetrics, got.Metrics); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]gen.ComparedSeries{{Step: "fit", Name: "loss", Values: [][]float64{nil, {0.9, 0.4}}}}, got.Series); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
}

// A metric whose step declares it minimized (a loss) has its lowest value
// best: the goal comes from the first compared run's pipeline version
// that declares it.
func TestCompareRunsMinimizedMetric(t *testing.T) {
	h := newHarness(t)
	spec := []byte(`{"spec":{"steps":[{"name":"fit","metrics":{"val_loss":"minimize"},"container":{"command":["x"]}}]}}`)
	a := finishedRun(runID1, nil, nil, &runstate.Metrics{Scalars: map[string]float64{"val_loss": 0.3, "accuracy": 0.9}})
	a.Input = spec
	b := finishedRun(runID2, nil, nil, &runstate.Metrics{Scalars: map[string]float64{"val_loss": 0.2, "accuracy": 0.8}})
	h.cat.setRun(a)
	h.cat.setRun(b)
	var got gen.RunComparison
	r := h.do("GET", "/v1/projects/alpha/compare?runs="+runID1+"&runs="+runID2, h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	r.json(t, &got)
	want := []gen.ComparedMetric{
		{Step: "fit", Name: "accuracy", Values: []*float64{ptr(0.9), ptr(0.8)}, Differs: true, Best: ptr(0), Worst: ptr(1), Goal: gen.Maximize},
		{Step: "fit", Name: "val_loss", Values: []*float64{ptr(0.3), ptr(0.2)}, Differs: true, Best: ptr(1), Worst: ptr(0), Goal: gen.Minimize},
	}
	if diff := cmp.Diff(want, got.Metrics); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

func TestCompareRunsProblems(t *testing.T) {
	h := newHarness(t)
	h.cat.setRun(finishedRun(runID1, nil, nil, nil))
	h.cat.setRun(finishedRun(runID2, nil, nil, nil))
	p := wantProblem(t, h.do("GET", "/v1/projects/alpha/compare?runs="+runID1, h.viewer, nil), http.StatusBadRequest, "invalid-request")
	if got := errorPaths(p); len(got) != 1 || got[0] != "query.runs" {
		t.Errorf("one run: paths %v", got)
	}
	p = wantProblem(t, h.do("GET", "/v1/projects/alpha/compare?runs="+runID1+"&runs="+runID2+"&runs="+runID1, h.viewer, nil), http.StatusBadRequest, "invalid-request")
	if got := errorPaths(p); len(got) != 1 || got[0] != "query.runs[2]" {
		t.Errorf("a duplicate: paths %v", got)
	}
	// Another project's token learns nothing, not even that the runs exist.
	wantProblem(t, h.do("GET", "/v1/projects/beta/compare?runs="+runID1+"&runs="+runID2, h.betaEditor, nil), http.StatusNotFound, "not-found")
	wantProblem(t, h.do("GET", "/v1/projects/alpha/compare?runs="+runID1+"&runs="+runID2, h.betaEditor, nil), http.StatusNotFound, "not-found")
	wantProblem(t, h.do("GET", "/v1/projects/alpha/compare?runs="+runID1+"&runs="+runID3, h.viewer, nil), http.StatusNotFound, "not-found")
	wantProblem(t, h.do("GET", "/v1/projects/alpha/compare?runs="+runID1+"&runs="+runID2, "", nil), http.StatusUnauthorized, "unauthenticated")
}
