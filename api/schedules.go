package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/client/runclient"
)

// Schedules are Temporal Schedules of pipeline runs; client/runclient
// implements it. Errors: runclient.ErrScheduleNotFound, ErrScheduleExists,
// *runclient.InvalidScheduleError.
type Schedules interface {
	CreateSchedule(ctx context.Context, r runclient.ScheduleRequest) error
	DescribeSchedule(ctx context.Context, project, name string) (runclient.ScheduleView, error)
	ListSchedules(ctx context.Context, project string) ([]runclient.ScheduleView, error)
	PauseSchedule(ctx context.Context, project, name string, pause bool, note string) error
	TriggerSchedule(ctx context.Context, project, name string) error
	BackfillSchedule(ctx context.Context, project, name string, start, end time.Time) error
	DeleteSchedule(ctx context.Context, project, name string) error
}

// WithSchedules serves /schedules through sc.
func WithSchedules(sc Schedules) Option { return func(s *server) { s.schedules = sc } }

var ptInvalidSchedule = problemType{"invalid-schedule", "Invalid schedule", http.StatusUnprocessableEntity}

// Bounds that keep a schedule from flooding the engine or a backfill from
// starting an unbounded number of runs.
const (
	minScheduleEvery   = time.Second
	minCatchupWindow   = 10 * time.Second
	maxBackfillPeriod  = 366 * 24 * time.Hour
	maxScheduleJitter  = 24 * time.Hour
	scheduleNoteMaxLen = 1000
)

var overlapPolicies = map[gen.ScheduleOverlap]enumspb.ScheduleOverlapPolicy{
	gen.Skip:           enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
	gen.BufferOne:      enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE,
	gen.BufferAll:      enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL,
	gen.CancelOther:    enumspb.SCHEDULE_OVERLAP_POLICY_CANCEL_OTHER,
	gen.TerminateOther: enumspb.SCHEDULE_OVERLAP_POLICY_TERMINATE_OTHER,
	gen.AllowAll:       enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL,
}

// CreateSchedule resolves what the runs start as a run start would (a
// declarative pipeline's version and params, or a registered Go pipeline
// and its input), so that a schedule of an unknown pipeline or with bad
// params is a clear error now, not a failed run at 2 am, then creates the
// schedule.
func (s *server) CreateSchedule(ctx context.Context, req gen.CreateScheduleRequestObject) (gen.CreateScheduleResponseObject, error) {
	if err := s.schedulesOn(); err != nil {
		return nil, err
	}
	b := deref(req.Body)
	sr, fields := scheduleSpec(b)
	fields = append(fields, scheduleTarget(b)...)
	if len(fields) > 0 {
		return nil, newProblem(ptInvalidSchedule, "%s", summarize(fields)).withErrors(fields)
	}
	// The runs' input, exactly as for POST /runs; each run gets its own ID
	// from Temporal, so the input carries none.
	run := gen.CreateRunRequest{Version: b.Version, Params: b.Params, Workflow: b.Workflow, Input: b.Input}
	if b.Pipeline != "" {
		run.Pipeline = &b.Pipeline
	}
	if err := checkRunRequest(run); err != nil {
		return nil, err
	}
	var start runclient.StartRequest
	var err error
	field := "pipeline"
	if b.Workflow != nil {
		field = "workflow"
		_, start, err = s.planWorkflowRun(ctx, req.Project, "", run)
	} else {
		_, start, _, err = s.planPipelineRun(ctx, req.Project, "", run, true)
	}
	var p *problem
	if errors.As(err, &p) && p.body.Status == http.StatusNotFound {
		// In the body, not the path: a 422 naming the field.
		fe := []gen.FieldError{{Path: field, Message: deref(p.body.Detail)}}
		return nil, newProblem(ptInvalidSchedule, "%s", summarize(fe)).withErrors(fe)
	}
	if err != nil {
		return nil, err
	}
	if b.Pipeline != "" {
		var in struct {
			Version int            `json:"version"`
			Params  map[string]any `json:"params"`
		}
		raw, _ := start.Input.(json.RawMessage)
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, internalError(err)
		}
		sr.Version, sr.Params = in.Version, in.Params
	}
	sr.Project, sr.Name, sr.Start = req.Project, b.Name, start
	sr.CreatedBy = principal(ctx).Name
	if err := s.scheduleErr(req.Project, b.Name, s.schedules.CreateSchedule(ctx, sr)); err != nil {
		return nil, err
	}
	v, err := s.scheduleView(ctx, req.Project, b.Name)
	if err != nil {
		return nil, err
	}
	return gen.CreateSchedule201JSONResponse(v), nil
}

// scheduleTarget checks that the schedule starts exactly one thing: a
// declarative pipeline (with version and params) or a Go pipeline (with
// input), as POST /runs does.
func scheduleTarget(b gen.ScheduleCreate) []gen.FieldError {
	var fields []gen.FieldError
	bad := func(path, msg string) { fields = append(fields, gen.FieldError{Path: path, Message: msg}) }
	switch hasP, hasW := b.Pipeline != "", b.Workflow != nil; {
	case hasP == hasW:
		bad("pipeline", "give exactly one of pipeline (a declarative pipeline) and workflow (a Go pipeline)")
	case hasP && b.Input != nil:
		bad("input", "input is for Go pipelines (workflow); pipelines take params")
	case hasW && b.Params != nil:
		bad("params", "params are for pipelines; Go pipelines (workflow) take input")
	case hasW && b.Version != nil:
		bad("version", "version is for pipelines")
	}
	return fields
}

// scheduleSpec checks what the gateway can check itself; Temporal checks
// the cron expressions and time zone (its refusal is a 422 too).
func scheduleSpec(b gen.ScheduleCreate) (runclient.ScheduleRequest, []gen.FieldError) {
	var r runclient.ScheduleRequest
	var fields []gen.FieldError
	bad := func(path, msg string) { fields = append(fields, gen.FieldError{Path: path, Message: msg}) }
	r.Cron = deref(b.Cron)
	for i, e := range deref(b.Every) {
		d, err := time.ParseDuration(e)
		switch {
		case err != nil:
			bad(fmt.Sprintf("every[%d]", i), "not a duration: use a value such as \"90s\" or \"6h\"")
		case d < minScheduleEvery:
			bad(fmt.Sprintf("every[%d]", i), "must be at least 1s")
		}
		r.Every = append(r.Every, d)
	}
	if len(r.Cron) == 0 && len(r.Every) == 0 {
		bad("cron", "give at least one cron expression or one interval (every)")
	}
	r.TimeZone = deref(b.TimeZone)
	if b.TimeZone != nil {
		if _, err := time.LoadLocation(r.TimeZone); err != nil {
			bad("timeZone", "unknown time zone: use an IANA name such as \"Europe/Paris\"")
		}
	}
	r.Jitter = optDuration(b.Jitter, "jitter", 0, maxScheduleJitter, bad)
	r.CatchupWindow = optDuration(b.CatchupWindow, "catchupWindow", minCatchupWindow, 0, bad)
	r.Overlap = enumspb.SCHEDULE_OVERLAP_POLICY_SKIP
	if b.Overlap != nil {
		r.Overlap = overlapPolicies[*b.Overlap] // the schema allows only the enum's values
	}
	r.Paused, r.Note = deref(b.Paused), deref(b.Note)
	return r, fields
}

func optDuration(v *string, path string, lo, hi time.Duration, bad func(string, string)) time.Duration {
	if v == nil {
		return 0
	}
	d, err := time.ParseDuration(*v)
	switch {
	case err != nil:
		bad(path, "not a duration: use a value such as \"90s\" or \"6h\"")
	case d < lo:
		bad(path, "must be at least "+lo.String())
	case hi > 0 && d > hi:
		bad(path, "must be at most "+hi.String())
	}
	return d
}

// GetSchedule describes a schedule.
func (s *server) GetSchedule(ctx context.Context, req gen.GetScheduleRequestObject) (gen.GetScheduleResponseObject, error) {
	if err := s.schedulesOn(); err != nil {
		return nil, err
	}
	v, err := s.scheduleView(ctx, req.Project, req.Schedule)
	if err != nil {
		return nil, err
	}
	return gen.GetSchedule200JSONResponse(v), nil
}

// ListSchedules lists the project's schedules.
func (s *server) ListSchedules(ctx context.Context, req gen.ListSchedulesRequestObject) (gen.ListSchedulesResponseObject, error) {
	if err := s.schedulesOn(); err != nil {
		return nil, err
	}
	vs, err := s.schedules.ListSchedules(ctx, req.Project)
	if err != nil {
		return nil, s.scheduleErr(req.Project, "", err)
	}
	out := gen.ScheduleList{Items: make([]gen.Schedule, 0, len(vs))}
	for _, v := range vs {
		out.Items = append(out.Items, scheduleView(v))
	}
	return gen.ListSchedules200JSONResponse(out), nil
}

// DeleteSchedule deletes a schedule.
func (s *server) DeleteSchedule(ctx context.Context, req gen.DeleteScheduleRequestObject) (gen.DeleteScheduleResponseObject, error) {
	if err := s.schedulesOn(); err != nil {
		return nil, err
	}
	if err := s.scheduleErr(req.Project, req.Schedule, s.schedules.DeleteSchedule(ctx, req.Project, req.Schedule)); err != nil {
		return nil, err
	}
	return gen.DeleteSchedule204Response{}, nil
}

// PauseSchedule pauses a schedule.
func (s *server) PauseSchedule(ctx context.Context, req gen.PauseScheduleRequestObject) (gen.PauseScheduleResponseObject, error) {
	v, err := s.pause(ctx, req.Project, req.Schedule, true, req.Body)
	if err != nil {
		return nil, err
	}
	return gen.PauseSchedule200JSONResponse(v), nil
}

// UnpauseSchedule unpauses a schedule.
func (s *server) UnpauseSchedule(ctx context.Context, req gen.UnpauseScheduleRequestObject) (gen.UnpauseScheduleResponseObject, error) {
	v, err := s.pause(ctx, req.Project, req.Schedule, false, req.Body)
	if err != nil {
		return nil, err
	}
	return gen.UnpauseSchedule200JSONResponse(v), nil
}

func (s *server) pause(ctx context.Context, project, name string, pause bool, body *gen.ScheduleNote) (gen.Schedule, error) {
	if err := s.schedulesOn(); err != nil {
		return gen.Schedule{}, err
	}
	note := ""
	if body != nil {
		note = deref(body.Note)
	}
	if note == "" {
		note = "paused through REST by " + principal(ctx).Name
		if !pause {
			note = "unpaused through REST by " + principal(ctx).Name
		}
	}
	if err := s.scheduleErr(project, name, s.schedules.PauseSchedule(ctx, project, name, pause, note)); err != nil {
		return gen.Schedule{}, err
	}
	return s.scheduleView(ctx, project, name)
}

// TriggerSchedule starts a run now.
func (s *server) TriggerSchedule(ctx context.Context, req gen.TriggerScheduleRequestObject) (gen.TriggerScheduleResponseObject, error) {
	if err := s.schedulesOn(); err != nil {
		return nil, err
	}
	if err := s.scheduleErr(req.Project, req.Schedule, s.schedules.TriggerSchedule(ctx, req.Project, req.Schedule)); err != nil {
		return nil, err
	}
	v, err := s.scheduleView(ctx, req.Project, req.Schedule)
	if err != nil {
		return nil, err
	}
	return gen.TriggerSchedule200JSONResponse(v), nil
}

// BackfillSchedule starts the runs of a past range.
func (s *server) BackfillSchedule(ctx context.Context, req gen.BackfillScheduleRequestObject) (gen.BackfillScheduleResponseObject, error) {
	if err := s.schedulesOn(); err != nil {
		return nil, err
	}
	b := deref(req.Body)
	switch {
	case !b.End.After(b.Start):
		fe := []gen.FieldError{{Path: "end", Message: "must be after start"}}
		return nil, newProblem(ptInvalidSchedule, "%s", summarize(fe)).withErrors(fe)
	case b.End.Sub(b.Start) > maxBackfillPeriod:
		fe := []gen.FieldError{{Path: "end", Message: "a backfill covers at most 366 days; split it"}}
		return nil, newProblem(ptInvalidSchedule, "%s", summarize(fe)).withErrors(fe)
	}
	if err := s.scheduleErr(req.Project, req.Schedule, s.schedules.BackfillSchedule(ctx, req.Project, req.Schedule, b.Start, b.End)); err != nil {
		return nil, err
	}
	v, err := s.scheduleView(ctx, req.Project, req.Schedule)
	if err != nil {
		return nil, err
	}
	return gen.BackfillSchedule200JSONResponse(v), nil
}

func (s *server) schedulesOn() error {
	if s.schedules == nil {
		return newProblem(ptUnavailable, "schedules are not served by this gateway")
	}
	return nil
}

func (s *server) scheduleView(ctx context.Context, project, name string) (gen.Schedule, error) {
	v, err := s.schedules.DescribeSchedule(ctx, project, name)
	if err != nil {
		return gen.Schedule{}, s.scheduleErr(project, name, err)
	}
	return scheduleView(v), nil
}

// scheduleErr maps the schedule client's errors to problems.
func (s *server) scheduleErr(project, name string, err error) error {
	var invalid *runclient.InvalidScheduleError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, runclient.ErrScheduleNotFound):
		return notFound("schedule %q not found in project %q", name, project)
	case errors.Is(err, runclient.ErrScheduleExists):
		return newProblem(ptAlreadyExists, "schedule %q already exists in project %q", name, project)
	case errors.As(err, &invalid):
		fe := []gen.FieldError{{Path: "cron", Message: invalid.Message}}
		return newProblem(ptInvalidSchedule, "Temporal refused the schedule: %s", invalid.Message).withErrors(fe)
	}
	return newProblem(ptUnavailable, "Temporal is unavailable; retry in a few seconds").
		withHeader("Retry-After", retryAfterSeconds).withCause(err)
}
