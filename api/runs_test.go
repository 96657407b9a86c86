package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

const runsPath = "/v1/projects/alpha/runs"

// withPipeline stores specJSON as alpha/train version 1.
func withPipeline(t *testing.T, h *harness) {
	t.Helper()
	wantStatus(t, h.do("POST", "/v1/projects/alpha/pipelines/train/versions", h.editor, specJSON), http.StatusCreated)
}

func TestStartPipelineRun(t *testing.T) {
	h := newHarness(t)
	withPipeline(t, h)
	r := h.do("POST", runsPath, h.editor, map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 3}})
	wantStatus(t, r, http.StatusCreated)
	var run gen.Run
	r.json(t, &run)
	if run.State != gen.RunStatePENDING || deref(run.Pipeline) != "train" || deref(run.Version) != 1 || deref(run.CreatedBy) != "ci" {
		t.Fatalf("%+v", run)
	}
	if r.Header.Get("Location") != runsPath+"/"+run.Id || run.Links.Self != runsPath+"/"+run.Id ||
		run.Links.Events != run.Links.Self+"/events" || deref(run.Links.TemporalUI) == "" {
		t.Fatalf("links %+v, Location %q", run.Links, r.Header.Get("Location"))
	}
	if len(run.Id) != 36 || run.Id[14] != '7' {
		t.Fatalf("run ID %q is not a UUIDv7", run.Id)
	}

	if len(h.eng.started) != 1 {
		t.Fatalf("started %d", len(h.eng.started))
	}
	st := h.eng.started[0]
	if st.RunID != run.Id || st.Workflow != runstate.PipelineWorkflowName || st.TaskQueue != runstate.TaskQueueLocal || st.Pipeline != "train" || st.Project != "alpha" {
		t.Fatalf("%+v", st)
	}
	var in workflows.PipelineInput
	if err := json.Unmarshal(st.Input.(json.RawMessage), &in); err != nil {
		t.Fatal(err)
	}
	if in.RunID != run.Id || in.Version != 1 || len(in.Spec.Steps) != 2 || in.Params["lr"] != 0.1 || in.Params["epochs"] != 3.0 {
		t.Fatalf("input %+v", in)
	}
	row := h.cat.runs[run.Id]
	if row.RequestHash == "" || string(row.Input) != string(st.Input.(json.RawMessage)) {
		t.Fatal("row lacks its request hash or input")
	}
	if !strings.Contains(string(h.do("GET", "/metrics", "", nil).body), `atelier_runs_started_total{kind="pipeline"} 1`) {
		t.Error("runs started not counted")
	}
}

func TestStartRunProblems(t *testing.T) {
	h := newHarness(t)
	withPipeline(t, h)
	h.cat.workflows["etl"] = catalog.GoWorkflow{Name: "etl", TaskQueue: "go-q", UpdatedAt: t0}

	p := wantProblem(t, h.do("POST", runsPath, h.editor, map[string]any{"pipeline": "train", "params": map[string]any{"lr": "fast", "bogus": 1}}),
		http.StatusUnprocessableEntity, "invalid-params")
	if got := strings.Join(errorPaths(p), " "); !strings.Contains(got, "params.lr") || !strings.Contains(got, "params.bogus") || !strings.Contains(got, "params.epochs") {
		t.Errorf("paths %q", got)
	}
	wantProblem(t, h.do("POST", runsPath, h.editor, map[string]any{"pipeline": "train", "workflow": "etl"}), http.StatusBadRequest, "invalid-request")
	wantProblem(t, h.do("POST", runsPath, h.editor, map[string]any{}), http.StatusBadRequest, "invalid-request")
	wantProblem(t, h.do("POST", runsPath, h.editor, map[string]any{"workflow": "etl", "params": map[string]any{}}), http.StatusBadRequest, "invalid-request")
	wantProblem(t, h.do("POST", runsPath, h.editor, map[string]any{"pipeline": "nope"}), http.StatusNotFound, "not-found")
	wantProblem(t, h.do("POST", runsPath, h.editor, map[string]any{"pipeline": "train", "version": 9, "params": map[string]any{"epochs": 1}}), http.StatusNotFound, "not-found")
	p = wantProblem(t, h.do("POST", runsPath, h.editor, map[string]any{"workflow": "ghost"}), http.StatusNotFound, "not-found")
	if !strings.Contains(*p.Detail, `no worker has registered workflow "ghost"`) {
		t.Errorf("detail %q", *p.Detail)
	}
	p = wantProblem(t, h.do("POST", runsPath, h.editor, `{"pipeline": "train", "colour": "red"}`), http.StatusBadRequest, "invalid-request")
	if got := errorPaths(p); len(got) != 1 || got[0] != "colour" {
		t.Errorf("paths %v", got)
	}
	wantProblem(t, h.do("POST", runsPath, h.editor, `{"pipeline": `), http.StatusBadRequest, "malformed-request")
	if len(h.eng.started) != 0 || len(h.cat.runs) != 0 {
		t.Fatal("a failed request started or stored something")
	}
}

// A run of a subset: its targets travel in the workflow input, without
// repeats; unknown steps are a 422 each at its path, and a Go workflow
// takes none.
func TestStartRunWithTargets(t *testing.T) {
	h := newHarness(t)
	withPipeline(t, h)
	h.cat.workflows["etl"] = catalog.GoWorkflow{Name: "etl", TaskQueue: "go-q", UpdatedAt: t0}
	wantStatus(t, h.do("POST", runsPath, h.editor, map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 3}, "targets": []string{"prep", "prep"}}), http.StatusCreated)
	var in workflows.PipelineInput
	if err := json.Unmarshal(h.eng.started[0].Input.(json.RawMessage), &in); err != nil {
		t.Fatal(err)
	}
	if strings.Join(in.Targets, ",") != "prep" {
		t.Fatalf("targets %v", in.Targets)
	}

	p := wantProblem(t, h.do("POST", runsPath, h.editor, map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 3}, "targets": []string{"fit", "tran", "eval"}}),
		http.StatusUnprocessableEntity, "invalid-targets")
	if got := strings.Join(errorPaths(p), " "); got != "targets[1] targets[2]" {
		t.Errorf("paths %q", got)
	}
	if !strings.Contains(*p.Detail, `no step "tran" in pipeline "train" version 1 (steps: prep, fit)`) {
		t.Errorf("detail %q", *p.Detail)
	}
	wantProblem(t, h.do("POST", runsPath, h.editor, map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 3}, "targets": []string{}}),
		http.StatusUnprocessableEntity, "invalid-targets")
	p = wantProblem(t, h.do("POST", runsPath, h.editor, map[string]any{"workflow": "etl", "targets": []string{"x"}}), http.StatusBadRequest, "invalid-request")
	if got := errorPaths(p); len(got) != 1 || got[0] != "targets" {
		t.Errorf("paths %v", got)
	}
	if len(h.eng.started) != 1 {
		t.Fatalf("a refused request started a run (%d started)", len(h.eng.started))
	}
}

func TestStartGoWorkflowRun(t *testing.T) {
	h := newHarness(t)
	h.cat.workflows["etl"] = catalog.GoWorkflow{Name: "etl", TaskQueue: "go-q", UpdatedAt: t0}
	r := h.do("POST", runsPath, h.editor, `{"workflow": "etl", "input": {"b": [1, 2], "a": "x"}}`)
	wantStatus(t, r, http.StatusCreated)
	st := h.eng.started[0]
	if st.Workflow != "etl" || st.TaskQueue != "go-q" || st.Pipeline != "" {
		t.Fatalf("%+v", st)
	}
	if got := string(st.Input.(json.RawMessage)); got != `{"b":[1,2],"a":"x"}` {
		t.Fatalf("input %s", got)
	}
	// Without input the workflow starts with no argument.
	wantStatus(t, h.do("POST", runsPath, h.editor, map[string]any{"workflow": "etl"}), http.StatusCreated)
	if h.eng.started[1].Input != nil {
		t.Fatalf("input %v", h.eng.started[1].Input)
	}
}

func TestIdempotency(t *testing.T) {
	h := newHarness(t)
	withPipeline(t, h)
	body := map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 3, "lr": 0.5}}
	key := []string{"Idempotency-Key", "build-42"}

	r1 := h.do("POST", runsPath, h.editor, body, key...)
	wantStatus(t, r1, http.StatusCreated)
	var first gen.Run
	r1.json(t, &first)

	// Same key, same body (other key order): the same run, started again
	// idempotently since its row is still PENDING.
	r2 := h.do("POST", runsPath, h.editor, `{"params": {"lr": 0.5, "epochs": 3}, "pipeline": "train"}`, key...)
	wantStatus(t, r2, http.StatusOK)
	var second gen.Run
	r2.json(t, &second)
	if second.Id != first.Id || len(h.cat.runs) != 1 {
		t.Fatalf("second run %s, first %s", second.Id, first.Id)
	}
	if len(h.eng.started) != 2 || h.eng.started[1].RunID != first.Id {
		t.Fatalf("restart: %+v", h.eng.started)
	}

	// Once running, a replay does not touch Temporal.
	row := h.cat.runs[first.Id]
	row.State = runstate.Running
	h.cat.setRun(row)
	wantStatus(t, h.do("POST", runsPath, h.editor, body, key...), http.StatusOK)
	if len(h.eng.started) != 2 {
		t.Fatal("replay of a running run restarted it")
	}

	// Same key, other body: conflict.
	body["params"] = map[string]any{"epochs": 4}
	p := wantProblem(t, h.do("POST", runsPath, h.editor, body, key...), http.StatusConflict, "idempotency-key-reused")
	if !strings.Contains(*p.Detail, first.Id) {
		t.Errorf("detail %q", *p.Detail)
	}
	// Keys are per project: beta's identical key starts its own run.
	h.cat.workflows["etl"] = catalog.GoWorkflow{Name: "etl", TaskQueue: "q", UpdatedAt: t0}
	wantStatus(t, h.do("POST", "/v1/projects/beta/runs", h.betaEditor, map[string]any{"workflow": "etl"}, key...), http.StatusCreated)
}

func TestStartFailureLeavesNothing(t *testing.T) {
	h := newHarness(t)
	withPipeline(t, h)
	h.eng.startErr = errors.New("temporal: connection refused to 10.1.2.3")
	body := map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 1}}
	key := []string{"Idempotency-Key", "k1"}
	r := h.do("POST", runsPath, h.editor, body, key...)
	wantProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	if strings.Contains(string(r.body), "10.1.2.3") {
		t.Fatalf("leaks cause: %s", r.body)
	}
	if len(h.cat.runs) != 0 || len(h.cat.deleted) != 1 {
		t.Fatalf("runs %d deleted %v", len(h.cat.runs), h.cat.deleted)
	}
	// The retry with the same key succeeds once Temporal is back.
	h.eng.startErr = nil
	wantStatus(t, h.do("POST", runsPath, h.editor, body, key...), http.StatusCreated)
}

// An ambiguous start (timeout, dropped reply) may have started the
// workflow: the row stays, and a retry with the same key completes the
// start of the same run rather than starting a second one.
func TestUncertainStartKeepsTheRunForTheRetry(t *testing.T) {
	h := newHarness(t)
	withPipeline(t, h)
	h.eng.startErr = fmt.Errorf("engine: start run: %w: %w", runclient.ErrStartUncertain, errors.New("context deadline exceeded"))
	body := map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 1}}
	key := []string{"Idempotency-Key", "k1"}
	r := h.do("POST", runsPath, h.editor, body, key...)
	p := wantProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	if len(h.cat.runs) != 1 || len(h.cat.deleted) != 0 {
		t.Fatalf("runs %d deleted %v: the row must stay", len(h.cat.runs), h.cat.deleted)
	}
	var id string
	for id = range h.cat.runs {
	}
	if !strings.Contains(*p.Detail, id) || !strings.Contains(*p.Detail, "Idempotency-Key") {
		t.Errorf("detail %q", *p.Detail)
	}
	h.eng.startErr = nil
	r = h.do("POST", runsPath, h.editor, body, key...)
	wantStatus(t, r, http.StatusOK)
	var run gen.Run
	if err := json.Unmarshal(r.body, &run); err != nil {
		t.Fatal(err)
	}
	if run.Id != id || len(h.eng.started) != 1 || h.eng.started[0].RunID != id {
		t.Fatalf("retry gave run %s, starts %+v; want the one run %s", run.Id, h.eng.started, id)
	}
}

func TestListRuns(t *testing.T) {
	h := newHarness(t)
	withPipeline(t, h)
	h.cat.workflows["etl"] = catalog.GoWorkflow{Name: "etl", TaskQueue: "q", UpdatedAt: t0}
	var ids []string
	for i := 0; i < 5; i++ {
		body := map[string]any{"workflow": "etl"}
		if i%2 == 0 {
			body = map[string]any{"pipeline": "train", "params": map[string]any{"epochs": i}}
		}
		var run gen.Run
		h.do("POST", runsPath, h.editor, body).json(t, &run)
		ids = append(ids, run.Id)
	}
	// Newest first, two per page.
	var got []string
	token := ""
	for page := 0; page < 5; page++ {
		path := runsPath + "?pageSize=2"
		if token != "" {
			path += "&pageToken=" + token
		}
		var l gen.RunList
		r := h.do("GET", path, h.viewer, nil)
		wantStatus(t, r, http.StatusOK)
		r.json(t, &l)
		for _, run := range l.Runs {
			if run.Status != nil {
				t.Fatal("listing carries step status")
			}
			got = append(got, run.Id)
		}
		if l.NextPageToken == nil {
			break
		}
		token = *l.NextPageToken
	}
	if strings.Join(got, ",") != strings.Join([]string{ids[4], ids[3], ids[2], ids[1], ids[0]}, ",") {
		t.Fatalf("order %v", got)
	}

	var l gen.RunList
	h.do("GET", runsPath+"?pipeline=train&state=PENDING", h.viewer, nil).json(t, &l)
	if len(l.Runs) != 3 {
		t.Fatalf("pipeline filter: %d", len(l.Runs))
	}
	// createdBy: the name of the token that started the run.
	h.do("GET", runsPath+"?createdBy=ci&state=PENDING", h.viewer, nil).json(t, &l)
	if len(l.Runs) != 5 || l.Runs[0].CreatedBy == nil || *l.Runs[0].CreatedBy != "ci" {
		t.Fatalf("createdBy filter: %+v", l.Runs)
	}
	h.do("GET", runsPath+"?createdBy=dash", h.viewer, nil).json(t, &l)
	if len(l.Runs) != 0 {
		t.Fatalf("createdBy=dash: %d runs, want none", len(l.Runs))
	}
	wantProblem(t, h.do("GET", runsPath+"?createdBy=", h.viewer, nil), http.StatusBadRequest, "invalid-request")
	after := h.cat.runs[ids[2]].CreatedAt.Format(time.RFC3339)
	h.do("GET", runsPath+"?createdAfter="+after, h.viewer, nil).json(t, &l)
	if len(l.Runs) != 3 { // inclusive, as in Postgres (catalogtest.Contract)
		t.Fatalf("createdAfter filter: %d", len(l.Runs))
	}

	wantProblem(t, h.do("GET", runsPath+"?pageToken=garbage", h.viewer, nil), http.StatusBadRequest, "invalid-request")
	p := wantProblem(t, h.do("GET", runsPath+"?pageSize=501&state=DONE", h.viewer, nil), http.StatusBadRequest, "invalid-request")
	if got := strings.Join(sorted(errorPaths(p)), ","); got != "query.pageSize,query.state" {
		t.Errorf("paths %s", got)
	}
	p = wantProblem(t, h.do("GET", runsPath+"?createdBefore=yesterday", h.viewer, nil), http.StatusBadRequest, "invalid-request")
	if got := errorPaths(p); len(got) != 1 || got[0] != "query.createdBefore" {
		t.Errorf("paths %v", got)
	}
}

func runningRun(h *harness) catalog.Run {
	started := t0
	run := catalog.Run{
		ID: runID1, Project: "alpha", Pipeline: "train", Version: 1, Workflow: runstate.PipelineWorkflowName,
		State: runstate.Running, CreatedAt: t0, UpdatedAt: t0,
		Status: &runstate.Status{RunID: runID1, Project: "alpha", Pipeline: "train", Version: 1,
			Workflow: runstate.PipelineWorkflowName, State: runstate.Running, Seq: 3, StartedAt: &started,
			Steps: []runstate.StepStatus{{Name: "prep", Kind: "container", State: runstate.StepRunning,
				Attempts: []runstate.Attempt{{Number: 1, State: runstate.StepRunning}}}}},
	}
	h.cat.setRun(run)
	return run
}

func TestGetRun(t *testing.T) {
	h := newHarness(t)
	run := runningRun(h)
	path := runsPath + "/" + runID1

	// No live answer: the mirrored status is served.
	var got gen.Run
	r := h.do("GET", path, h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	r.json(t, &got)
	if got.Status == nil || got.Status.Seq != 3 {
		t.Fatalf("%s", r.body)
	}
	wantSteps := []gen.StepStatus{{Name: "prep", Kind: "container", State: gen.StepStateRUNNING,
		Attempts: &[]gen.Attempt{{Number: 1, State: gen.StepStateRUNNING, LogUrl: ptr(path + "/steps/prep/logs?attempt=1")}}}}
	if diff := cmp.Diff(wantSteps, got.Status.Steps); diff != "" {
		t.Fatalf("steps (-want +got):\n%s", diff)
	}

	// A live answer newer than the mirror wins.
	live := *run.Status
	live.Seq, live.State = 5, runstate.Cancelling
	h.eng.setStatus(live)
	h.do("GET", path, h.viewer, nil).json(t, &got)
	if got.Status.Seq != 5 || got.State != gen.RunStateCANCELLING {
		t.Fatalf("%+v", got.Status)
	}

	// Terminal rows are served without asking Temporal.
	run.State = runstate.Succeeded
	run.Status.State = runstate.Succeeded
	h.cat.setRun(run)
	before := h.eng.queries
	h.do("GET", path, h.viewer, nil).json(t, &got)
	if h.eng.queries != before || got.State != gen.RunStateSUCCEEDED {
		t.Fatalf("queried a finished run (state %s)", got.State)
	}

	// A run with no status yet still has an (empty) step list.
	h.cat.setRun(catalog.Run{ID: runID2, Project: "alpha", Workflow: "etl", State: runstate.Pending, CreatedAt: t0, UpdatedAt: t0})
	h.do("GET", runsPath+"/"+runID2, h.viewer, nil).json(t, &got)
	if got.Status == nil || got.Status.Steps == nil || got.Status.State != gen.RunStatePENDING {
		t.Fatalf("%+v", got.Status)
	}

	p := wantProblem(t, h.do("GET", runsPath+"/not a run!", h.viewer, nil), http.StatusBadRequest, "invalid-request")
	if got := errorPaths(p); len(got) != 1 || got[0] != "path.run" {
		t.Errorf("paths %v", got)
	}
	wantProblem(t, h.do("GET", runsPath+"/"+runID3, h.viewer, nil), http.StatusNotFound, "not-found")
}

const (
	runID2 = "01970000-0000-7000-8000-000000000002"
	runID3 = "01970000-0000-7000-8000-000000000003"
)

func TestCancelRun(t *testing.T) {
	h := newHarness(t)
	run := runningRun(h)
	path := runsPath + "/" + runID1 + "/cancel"

	wantStatus(t, h.do("POST", path, h.editor, nil), http.StatusAccepted)
	wantStatus(t, h.do("POST", path, h.editor, map[string]any{"reason": "wrong data"}), http.StatusAccepted)
	if len(h.eng.signals) != 2 {
		t.Fatalf("signals %d", len(h.eng.signals))
	}
	s0, s1 := h.eng.signals[0], h.eng.signals[1]
	if s0.Reason != "cancelled via REST" || s1.Reason != "wrong data" || s0.Requester != "ci ("+h.editorTok.ID+")" || s0.At.IsZero() {
		t.Fatalf("%+v %+v", s0, s1)
	}
	wantProblem(t, h.do("POST", path, h.editor, map[string]any{"why": "x"}), http.StatusBadRequest, "invalid-request")

	h.eng.signalErr = runclient.ErrRunNotFound
	wantProblem(t, h.do("POST", path, h.editor, nil), http.StatusConflict, "run-finished")

	h.eng.signalErr = nil
	run.State = runstate.Failed
	h.cat.setRun(run)
	p := wantProblem(t, h.do("POST", path, h.editor, nil), http.StatusConflict, "run-finished")
	if !strings.Contains(*p.Detail, "FAILED") {
		t.Errorf("detail %q", *p.Detail)
	}
	if len(h.eng.signals) != 2 {
		t.Fatal("signalled a finished run")
	}
}

func TestStoreErrorsStayInternal(t *testing.T) {
	h := newHarness(t)
	h.cat.workflows["etl"] = catalog.GoWorkflow{Name: "etl", TaskQueue: "q", UpdatedAt: t0}
	h.cat.createRunErr = errors.New(`pq: relation "runs" does not exist`)
	r := h.do("POST", runsPath, h.editor, map[string]any{"workflow": "etl"})
	wantProblem(t, r, http.StatusInternalServerError, "internal")
	if strings.Contains(string(r.body), "relation") {
		t.Fatalf("leaks: %s", r.body)
	}
	if h.logs.FilterMessage("request failed").Len() != 1 {
		t.Fatal("cause not logged")
	}
}

// The gateway owns log URLs: it links the logs it serves (local attempts)
// and no others; a Kubernetes attempt's logs are in its cluster.
func TestLogURLsOnlyForLogsTheGatewayServes(t *testing.T) {
	h := newHarness(t)
	run := runningRun(h)
	st := *run.Status
	st.Steps = []runstate.StepStatus{
		{Name: "local", Kind: "container", State: runstate.StepRunning, Attempts: []runstate.Attempt{{Number: 1, State: runstate.StepRunning}}},
		{Name: "train", Kind: "ray", State: runstate.StepRunning, Attempts: []runstate.Attempt{{Number: 1, State: runstate.StepRunning, Cluster: "gpu-east", Links: map[string]string{"kubectl": "kubectl logs ..."}}}},
	}
	run.Status = &st
	h.cat.setRun(run)
	var got gen.Run
	r := h.do("GET", runsPath+"/"+runID1, h.viewer, nil)
	wantStatus(t, r, http.StatusOK)
	r.json(t, &got)
	want := []gen.StepStatus{
		{Name: "local", Kind: "container", State: gen.StepStateRUNNING, Attempts: &[]gen.Attempt{{Number: 1, State: gen.StepStateRUNNING,
			LogUrl: ptr(runsPath + "/" + runID1 + "/steps/local/logs?attempt=1")}}},
		// A Kubernetes attempt's log is stored by the cluster worker
		// (followed live for Jobs, copied at the end otherwise): served
		// the same way, its links kept.
		{Name: "train", Kind: "ray", State: gen.StepStateRUNNING, Attempts: &[]gen.Attempt{{Number: 1, State: gen.StepStateRUNNING,
			LogUrl:  ptr(runsPath + "/" + runID1 + "/steps/train/logs?attempt=1"),
			Cluster: ptr("gpu-east"), Links: &map[string]string{"kubectl": "kubectl logs ..."}}}},
	}
	if diff := cmp.Diff(want, got.Status.Steps); diff != "" {
		t.Errorf("log URLs (-want +got):\n%s", diff)
	}
}

// A scheduled run's ID holds colons; a client that escapes them (%3A)
// reaches the same run: the schema judges the unescaped value, as the
// handler sees it (it was a 400).
func TestRunIDWithEscapedColons(t *testing.T) {
	h := newHarness(t)
	id := "sched.alpha.nightly-2026-11-28T02:00:00Z"
	h.cat.setRun(catalog.Run{ID: id, Project: "alpha", Pipeline: "train", Version: 1, Workflow: runstate.PipelineWorkflowName,
		State: runstate.Succeeded, CreatedAt: t0, UpdatedAt: t0})
	for _, p := range []string{id, strings.ReplaceAll(id, ":", "%3A")} {
		r := h.do("GET", runsPath+"/"+p, h.viewer, nil)
		wantStatus(t, r, http.StatusOK)
		var run gen.Run
		r.json(t, &run)
		if run.Id != id {
			t.Fatalf("%s: got run %q", p, run.Id)
		}
	}
}

// A listing by metric names every problem of its params at once.
func TestListRunsByMetricProblems(t *testing.T) {
	h := newHarness(t)
	p := wantProblem(t, h.do("GET", runsPath+"?metric=accuracy&createdBy=ci&metricMin=2&metricMax=1", h.viewer, nil), http.StatusBadRequest, "invalid-request")
	if got := errorPaths(p); !slices.Equal(got, []string{"query.createdBy", "query.metric", "query.metricMin", "query.pipeline"}) {
		t.Fatalf("paths %v", got)
	}
	p = wantProblem(t, h.do("GET", runsPath+"?metricOrder=asc", h.viewer, nil), http.StatusBadRequest, "invalid-request")
	if got := errorPaths(p); !slices.Equal(got, []string{"query.metricOrder"}) {
		t.Fatalf("paths %v", got)
	}
}
