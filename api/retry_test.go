package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

func attempted(name string, state runstate.StepState, outputs any) runstate.StepStatus {
	return runstate.StepStatus{Name: name, State: state, Outputs: outputs, Attempts: []runstate.Attempt{{Number: 1, State: state}}}
}

// A Go pipeline run is retried as the same workflow with the same input,
// on the queue its workers register now; what it reuses travels in the
// start (the memo), not in the pipeline's own input.
func TestRetryOfAGoRun(t *testing.T) {
	h := newHarness(t)
	h.cat.workflows["etl"] = catalog.GoWorkflow{Name: "etl", TaskQueue: "go-q", UpdatedAt: t0}
	r := h.do("POST", "/v1/projects/alpha/runs", h.editor, map[string]any{"workflow": "etl", "input": map[string]any{"day": "monday"}})
	wantStatus(t, r, http.StatusCreated)
	var run gen.Run
	r.json(t, &run)
	h.eng.setStatus(runstate.Status{RunID: run.Id, Project: "alpha", Workflow: "etl", State: runstate.Failed, Steps: []runstate.StepStatus{
		attempted("extract", runstate.StepSucceeded, map[string]any{"rows": 3.0}),
		attempted("transform", runstate.StepSucceeded, nil),
		attempted("load", runstate.StepFailed, nil),
		{Name: "notify", State: runstate.StepSucceeded, OnExit: true},
	}})

	r = h.do("POST", "/v1/projects/alpha/runs/"+run.Id+"/retry", h.editor, nil)
	wantStatus(t, r, http.StatusCreated)
	var retried gen.Run
	r.json(t, &retried)
	if retried.Workflow != "etl" || retried.Pipeline != nil {
		t.Errorf("retry: %+v", retried)
	}
	start := h.eng.started[len(h.eng.started)-1]
	in, _ := start.Input.(json.RawMessage)
	if start.RunID != retried.Id || start.Workflow != "etl" || start.TaskQueue != "go-q" || string(in) != `{"day":"monday"}` {
		t.Errorf("start %+v (input %s)", start, in)
	}
	want := &runstate.Reuse{RetryOf: run.Id, Steps: []runstate.ReusedStep{
		{Name: "extract", Done: true, Outputs: map[string]any{"rows": 3.0}, Source: &runstate.CacheSource{Run: run.Id, Step: "extract", Attempt: 1}},
		{Name: "transform", Done: true, Source: &runstate.CacheSource{Run: run.Id, Step: "transform", Attempt: 1}},
	}}
	if !sameJSONForTest(start.Reuse, want) {
		t.Errorf("reuse %s, want %s", mustJSON(t, start.Reuse), mustJSON(t, want))
	}
	if row := h.cat.runs[retried.Id]; string(row.Input) != `{"day":"monday"}` || row.Workflow != "etl" {
		t.Errorf("row %+v", row)
	}

	// resumeFrom transform: it and every step created after it run again.
	wantStatus(t, h.do("POST", "/v1/projects/alpha/runs/"+run.Id+"/retry", h.editor, map[string]any{"resumeFrom": []string{"transform"}}), http.StatusCreated)
	if got := h.eng.started[len(h.eng.started)-1].Reuse; len(got.Steps) != 1 || got.Steps[0].Name != "extract" {
		t.Errorf("resumeFrom transform reuses %s", mustJSON(t, got))
	}
	// Unknown steps and exit handlers are refused, each at its index.
	p := wantProblem(t, h.do("POST", "/v1/projects/alpha/runs/"+run.Id+"/retry", h.editor, map[string]any{"resumeFrom": []string{"nope", "notify"}}), http.StatusBadRequest, "invalid-request")
	if !strings.Contains(problemAt(p, "resumeFrom[0]"), `no step "nope"`) || !strings.Contains(problemAt(p, "resumeFrom[1]"), "exit handlers always run again") {
		t.Errorf("%+v", p.Errors)
	}

	// A Go run started without input is retried without input (its row
	// says the gateway started it: Temporal is not asked).
	r = h.do("POST", "/v1/projects/alpha/runs", h.editor, map[string]any{"workflow": "etl"})
	wantStatus(t, r, http.StatusCreated)
	var bare gen.Run
	r.json(t, &bare)
	h.eng.setStatus(runstate.Status{RunID: bare.Id, Project: "alpha", Workflow: "etl", State: runstate.Failed, Steps: []runstate.StepStatus{}})
	wantStatus(t, h.do("POST", "/v1/projects/alpha/runs/"+bare.Id+"/retry", h.editor, nil), http.StatusCreated)
	if start := h.eng.started[len(h.eng.started)-1]; start.Input != nil || start.Workflow != "etl" {
		t.Errorf("retry of a run without input: %+v", start)
	}

	// No worker registers the workflow any more: nothing could run it.
	delete(h.cat.workflows, "etl")
	p = wantProblem(t, h.do("POST", "/v1/projects/alpha/runs/"+run.Id+"/retry", h.editor, nil), http.StatusConflict, "not-retryable")
	if !strings.Contains(*p.Detail, `no worker registers workflow "etl"`) {
		t.Errorf("%q", *p.Detail)
	}
}

// A run a schedule started has a catalogue row without input (its
// workflow's mirror wrote it): the retry reads the input from Temporal,
// and refuses clearly once Temporal no longer has it.
func TestRetryOfAScheduledRunReadsItsInputFromTemporal(t *testing.T) {
	h := newHarness(t)
	wantStatus(t, h.do("POST", "/v1/projects/alpha/pipelines/train/versions", h.editor, specJSON), http.StatusCreated)
	var v gen.PipelineVersion
	r := h.do("GET", "/v1/projects/alpha/pipelines/train/versions/1", h.editor, nil)
	wantStatus(t, r, http.StatusOK)
	r.json(t, &v)
	specRaw, err := json.Marshal(v.Spec)
	if err != nil {
		t.Fatal(err)
	}
	const id = "sched.alpha.nightly-2025-06-01T02:00:00Z"
	st := runstate.Status{RunID: id, Project: "alpha", Pipeline: "train", Version: 1, Workflow: runstate.PipelineWorkflowName,
		State: runstate.Failed, ScheduleID: "nightly", Steps: []runstate.StepStatus{
			attempted("prep", runstate.StepSucceeded, nil), attempted("fit", runstate.StepFailed, nil),
		}}
	h.cat.setRun(catalog.Run{ID: id, Project: "alpha", Pipeline: "train", Version: 1, Workflow: runstate.PipelineWorkflowName,
		State: runstate.Failed, Status: &st, CreatedAt: t0, UpdatedAt: t0})

	// Past retention: nothing holds the input any more.
	p := wantProblem(t, h.do("POST", "/v1/projects/alpha/runs/"+id+"/retry", h.editor, nil), http.StatusConflict, "not-retryable")
	if !strings.Contains(*p.Detail, "Temporal no longer has it") {
		t.Errorf("%q", *p.Detail)
	}

	// The schedule's input: the run ID is Temporal's, not in the input.
	h.eng.inputs = map[string]json.RawMessage{id: json.RawMessage(`{"runId":"","project":"alpha","pipeline":"train","version":1,"spec":` + string(specRaw) + `,"params":{"epochs":3,"lr":0.1}}`)}
	r = h.do("POST", "/v1/projects/alpha/runs/"+id+"/retry", h.editor, nil)
	wantStatus(t, r, http.StatusCreated)
	var retried gen.Run
	r.json(t, &retried)
	var in workflows.PipelineInput
	if err := json.Unmarshal(h.cat.runs[retried.Id].Input, &in); err != nil {
		t.Fatal(err)
	}
	if in.RunID != retried.Id || in.Params["epochs"] != 3.0 || in.Reuse == nil || in.Reuse.RetryOf != id || len(in.Reuse.Steps) != 1 || in.Reuse.Steps[0].Name != "prep" {
		t.Errorf("input of the retry: %s", mustJSON(t, in))
	}
	if start := h.eng.started[len(h.eng.started)-1]; start.Reuse != nil || start.Pipeline != "train" {
		t.Errorf("a declarative retry carries its plan in its input: %+v", start)
	}
}

func sameJSONForTest(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
