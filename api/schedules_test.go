package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// fakeSchedules keeps the schedules created, described as runclient
// would from what it stored.
type fakeSchedules struct {
	mu      sync.Mutex
	created map[string]runclient.ScheduleRequest
}

func (f *fakeSchedules) CreateSchedule(_ context.Context, r runclient.ScheduleRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.created[r.Project+"/"+r.Name]; ok {
		return runclient.ErrScheduleExists
	}
	f.created[r.Project+"/"+r.Name] = r
	return nil
}

func (f *fakeSchedules) DescribeSchedule(_ context.Context, project, name string) (runclient.ScheduleView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.created[project+"/"+name]
	if !ok {
		return runclient.ScheduleView{}, runclient.ErrScheduleNotFound
	}
	v := runclient.ScheduleView{Project: project, Name: name, Pipeline: r.Start.Pipeline, Version: r.Version, Params: r.Params,
		CreatedBy: r.CreatedBy, Every: r.Every, Overlap: r.Overlap}
	if r.Start.Workflow != runstate.PipelineWorkflowName {
		v.Workflow = r.Start.Workflow
		v.Input, _ = r.Start.Input.(json.RawMessage)
	}
	return v, nil
}

func (f *fakeSchedules) ListSchedules(context.Context, string) ([]runclient.ScheduleView, error) {
	return nil, nil
}
func (f *fakeSchedules) PauseSchedule(context.Context, string, string, bool, string) error {
	return nil
}
func (f *fakeSchedules) TriggerSchedule(context.Context, string, string) error { return nil }
func (f *fakeSchedules) BackfillSchedule(context.Context, string, string, time.Time, time.Time) error {
	return nil
}
func (f *fakeSchedules) DeleteSchedule(context.Context, string, string) error { return nil }

// A schedule of a native Go pipeline starts the registered workflow with
// its input, on the queue its workers poll, as POST /runs would; what a
// run start refuses, the schedule refuses up front, naming the field.
func TestScheduleOfAGoPipeline(t *testing.T) {
	sc := &fakeSchedules{created: map[string]runclient.ScheduleRequest{}}
	h := newHarness(t, WithSchedules(sc))
	h.cat.workflows["etl"] = catalog.GoWorkflow{Name: "etl", TaskQueue: "go-q", UpdatedAt: t0}
	wantStatus(t, h.do("POST", "/v1/projects/alpha/pipelines/train/versions", h.editor, specJSON), http.StatusCreated)

	r := h.do("POST", "/v1/projects/alpha/schedules", h.editor, map[string]any{
		"name": "hourly", "workflow": "etl", "input": map[string]any{"day": "monday"}, "every": []string{"1h"}})
	wantStatus(t, r, http.StatusCreated)
	var v gen.Schedule
	r.json(t, &v)
	if deref(v.Workflow) != "etl" || v.Input == nil || string(*v.Input) != `{"day":"monday"}` || v.Pipeline != "" || v.Version != 0 {
		t.Errorf("view %s", r.body)
	}
	req := sc.created["alpha/hourly"]
	in, _ := req.Start.Input.(json.RawMessage)
	if req.Start.Workflow != "etl" || req.Start.TaskQueue != "go-q" || req.Start.Project != "alpha" || string(in) != `{"day":"monday"}` || req.CreatedBy != "ci" {
		t.Errorf("schedule request %+v (input %s)", req, in)
	}

	for _, c := range []struct {
		body       map[string]any
		slug, path string
		want       string
	}{
		{map[string]any{"workflow": "nope"}, "invalid-schedule", "workflow", `no worker has registered workflow "nope"`},
		{map[string]any{"workflow": "etl", "pipeline": "train"}, "invalid-schedule", "pipeline", "exactly one of pipeline"},
		{map[string]any{}, "invalid-schedule", "pipeline", "exactly one of pipeline"},
		{map[string]any{"workflow": "etl", "params": map[string]any{"a": 1}}, "invalid-schedule", "params", "Go pipelines (workflow) take input"},
		{map[string]any{"workflow": "etl", "version": 2}, "invalid-schedule", "version", "version is for pipelines"},
		{map[string]any{"pipeline": "train", "input": 1}, "invalid-schedule", "input", "input is for Go pipelines"},
		{map[string]any{"workflow": "etl", "input": map[string]any{"day": "a\x00b"}}, "invalid-params", "input.day", "NUL"},
	} {
		body := map[string]any{"name": "bad", "every": []string{"1h"}}
		for k, x := range c.body {
			body[k] = x
		}
		p := wantProblem(t, h.do("POST", "/v1/projects/alpha/schedules", h.editor, body), http.StatusUnprocessableEntity, c.slug)
		if got := problemAt(p, c.path); !strings.Contains(got, c.want) {
			t.Errorf("%v: %s: %q, want %q", c.body, c.path, got, c.want)
		}
	}
	if _, ok := sc.created["alpha/bad"]; ok {
		t.Error("a refused schedule was created")
	}
}
