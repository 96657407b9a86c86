package runclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/atelier-ml/atelier/runstate"

	commonpb "go.temporal.io/api/common/v1"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
)

// Schedule errors callers branch on.
var (
	ErrScheduleNotFound = errors.New("schedule not found")
	ErrScheduleExists   = errors.New("schedule already exists")
)

// InvalidScheduleError is a schedule Temporal refused (a bad cron
// expression, time zone or interval); Message is Temporal's reason.
type InvalidScheduleError struct{ Message string }

func (e *InvalidScheduleError) Error() string { return e.Message }

// ScheduleRequest creates a schedule that starts runs of Start's pipeline
// (a declarative pipeline's version, or a native Go pipeline):
// each start is Start with the workflow ID Temporal gives it (the
// schedule's action ID and the scheduled time), so a scheduled run is a
// run like any other: the same input, task queue, search attributes and
// memo (its workflow writes its own catalogue row on its first mirror).
type ScheduleRequest struct {
	Project, Name string
	Start         StartRequest
	Version       int            // the pipeline version the runs use
	Params        map[string]any // as resolved, shown back
	CreatedBy     string

	Cron          []string
	Every         []time.Duration
	TimeZone      string
	Jitter        time.Duration
	Overlap       enumspb.ScheduleOverlapPolicy
	CatchupWindow time.Duration
	Paused        bool
	Note          string
}

// ScheduleView is a schedule as described by Temporal.
type ScheduleView struct {
	Project, Name, Pipeline, CreatedBy string
	Version                            int
	Params                             map[string]any
	// Workflow and Input are a native Go pipeline's (Pipeline is then
	// empty).
	Workflow              string
	Input                 json.RawMessage
	Cron                  []string
	Every                 []time.Duration
	TimeZone              string
	Jitter, CatchupWindow time.Duration
	Overlap               enumspb.ScheduleOverlapPolicy
	Paused                bool
	Note                  string
	Runs                  int // actions taken
	SkippedOverlap        int
	NextRuns              []time.Time
	RecentRuns            []ScheduledRun
	CreatedAt             time.Time
}

// ScheduledRun is one run a schedule started.
type ScheduledRun struct {
	RunID                  string
	ScheduledAt, StartedAt time.Time
}

// scheduleMemo is what Atelier keeps on the schedule to describe it.
type scheduleMemo struct {
	Project   string         `json:"project"`
	Name      string         `json:"name"`
	Pipeline  string         `json:"pipeline"`
	Version   int            `json:"version"`
	Params    map[string]any `json:"params,omitempty"`
	CreatedBy string         `json:"createdBy,omitempty"`
	// Workflow and Input describe the schedule of a native Go pipeline
	// (absent from those of declarative pipelines, and from every
	// schedule created before Go schedules existed).
	Workflow string          `json:"workflow,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
	// Cron is what the user wrote: Temporal keeps cron expressions as
	// calendars and describes them so (absent from schedules created
	// before it was kept).
	Cron []string `json:"cron,omitempty"`
}

// ScheduleID is the Temporal schedule of a project's schedule: the '/'
// separators cannot occur in either name, so projects never collide.
func ScheduleID(project, name string) string { return "atelier-schedule/" + project + "/" + name }

// scheduledRunPrefix is the workflow ID prefix of a schedule's runs;
// Temporal appends "-<scheduled time>".
func scheduledRunPrefix(project, name string) string { return "sched." + project + "." + name }

// CreateSchedule creates the schedule.
func (e *Client) CreateSchedule(ctx context.Context, r ScheduleRequest) error {
	r.Start.CreatedBy, r.Start.Schedule = r.CreatedBy, r.Name
	opts := e.startOptions(r.Start)
	var args []any
	if r.Start.Input != nil {
		args = append(args, r.Start.Input)
	}
	memo := scheduleMemo{
		Project: r.Project, Name: r.Name, Pipeline: r.Start.Pipeline, Version: r.Version,
		Params: r.Params, CreatedBy: r.CreatedBy, Cron: r.Cron,
	}
	if r.Start.Workflow != runstate.PipelineWorkflowName {
		memo.Workflow = r.Start.Workflow
		memo.Input, _ = r.Start.Input.(json.RawMessage)
	}
	_, err := e.c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID: ScheduleID(r.Project, r.Name),
		Spec: client.ScheduleSpec{
			CronExpressions: r.Cron, Intervals: intervals(r.Every),
			TimeZoneName: r.TimeZone, Jitter: r.Jitter,
		},
		Action: &client.ScheduleWorkflowAction{
			ID: scheduledRunPrefix(r.Project, r.Name), Workflow: r.Start.Workflow, Args: args,
			TaskQueue: r.Start.TaskQueue, TypedSearchAttributes: opts.TypedSearchAttributes, Memo: opts.Memo,
		},
		Overlap: r.Overlap, CatchupWindow: r.CatchupWindow, Paused: r.Paused, Note: r.Note,
		Memo: map[string]any{"atelier": memo},
	})
	var invalid *serviceerror.InvalidArgument
	switch {
	case errors.Is(err, temporal.ErrScheduleAlreadyRunning):
		return ErrScheduleExists
	case errors.As(err, &invalid):
		return &InvalidScheduleError{Message: invalid.Message}
	case err != nil:
		return fmt.Errorf("runclient: create schedule %s/%s: %w", r.Project, r.Name, err)
	}
	return nil
}

func intervals(every []time.Duration) []client.ScheduleIntervalSpec {
	var out []client.ScheduleIntervalSpec
	for _, d := range every {
		out = append(out, client.ScheduleIntervalSpec{Every: d})
	}
	return out
}

// DescribeSchedule answers ErrScheduleNotFound for a schedule that does
// not exist or is not the project's.
func (e *Client) DescribeSchedule(ctx context.Context, project, name string) (ScheduleView, error) {
	d, err := e.c.ScheduleClient().GetHandle(ctx, ScheduleID(project, name)).Describe(ctx)
	if err != nil {
		return ScheduleView{}, scheduleErr(err, project, name, "describe")
	}
	m, ok := memoOf(d.Memo)
	if !ok || m.Project != project || m.Name != name {
		return ScheduleView{}, ErrScheduleNotFound
	}
	v := ScheduleView{
		Project: project, Name: name, Pipeline: m.Pipeline, Version: m.Version, Params: m.Params, CreatedBy: m.CreatedBy,
		Workflow: m.Workflow, Input: m.Input,
		Runs: d.Info.NumActions, SkippedOverlap: d.Info.NumActionsSkippedOverlap,
		NextRuns: d.Info.NextActionTimes, CreatedAt: d.Info.CreatedAt,
	}
	if s := d.Schedule.Spec; s != nil {
		v.Cron, v.TimeZone, v.Jitter = s.CronExpressions, s.TimeZoneName, s.Jitter
		for _, iv := range s.Intervals {
			v.Every = append(v.Every, iv.Every)
		}
		if len(v.Cron) == 0 {
			// Temporal stores cron expressions as calendars and
			// describes those: what the user wrote is in the memo.
			v.Cron = m.Cron
		}
	}
	if p := d.Schedule.Policy; p != nil {
		v.Overlap, v.CatchupWindow = p.Overlap, p.CatchupWindow
	}
	if st := d.Schedule.State; st != nil {
		v.Paused, v.Note = st.Paused, st.Note
	}
	for _, a := range d.Info.RecentActions {
		if a.StartWorkflowResult != nil {
			v.RecentRuns = append(v.RecentRuns, ScheduledRun{RunID: a.StartWorkflowResult.WorkflowID, ScheduledAt: a.ScheduleTime, StartedAt: a.ActualTime})
		}
	}
	return v, nil
}

// ListSchedules returns the project's schedules, by name.
func (e *Client) ListSchedules(ctx context.Context, project string) ([]ScheduleView, error) {
	it, err := e.c.ScheduleClient().List(ctx, client.ScheduleListOptions{PageSize: 1000})
	if err != nil {
		return nil, fmt.Errorf("runclient: list schedules: %w", err)
	}
	prefix := ScheduleID(project, "")
	var out []ScheduleView
	for it.HasNext() {
		entry, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("runclient: list schedules: %w", err)
		}
		if !strings.HasPrefix(entry.ID, prefix) {
			continue
		}
		v, err := e.DescribeSchedule(ctx, project, strings.TrimPrefix(entry.ID, prefix))
		if errors.Is(err, ErrScheduleNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b ScheduleView) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// PauseSchedule pauses (pause true) or unpauses the schedule with a note.
func (e *Client) PauseSchedule(ctx context.Context, project, name string, pause bool, note string) error {
	if _, err := e.DescribeSchedule(ctx, project, name); err != nil {
		return err
	}
	h := e.c.ScheduleClient().GetHandle(ctx, ScheduleID(project, name))
	var err error
	if pause {
		err = h.Pause(ctx, client.SchedulePauseOptions{Note: note})
	} else {
		err = h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: note})
	}
	return scheduleErr(err, project, name, "pause")
}

// TriggerSchedule starts a run now (the schedule's overlap policy applies).
func (e *Client) TriggerSchedule(ctx context.Context, project, name string) error {
	if _, err := e.DescribeSchedule(ctx, project, name); err != nil {
		return err
	}
	err := e.c.ScheduleClient().GetHandle(ctx, ScheduleID(project, name)).Trigger(ctx, client.ScheduleTriggerOptions{})
	return scheduleErr(err, project, name, "trigger")
}

// BackfillSchedule starts the runs the schedule would have started in
// [start, end), all of them (overlap allowed): a backfill is asked for
// explicitly.
func (e *Client) BackfillSchedule(ctx context.Context, project, name string, start, end time.Time) error {
	if _, err := e.DescribeSchedule(ctx, project, name); err != nil {
		return err
	}
	err := e.c.ScheduleClient().GetHandle(ctx, ScheduleID(project, name)).Backfill(ctx, client.ScheduleBackfillOptions{
		Backfill: []client.ScheduleBackfill{backfillRange(start, end)},
	})
	return scheduleErr(err, project, name, "backfill")
}

// backfillRange is Temporal's backfill of Atelier's [start, end).
// Temporal's range includes both ends (its scheduler includes the start
// since its InclusiveBackfillStartTime version, in server 1.29 and the
// dev server Atelier tests with, and has always included the end, as
// BackfillRequest's own comment says), so over five one-minute intervals
// it would start six runs, and two adjacent backfills [a, b) and [b, c)
// would both start b's. Temporal compares each time (plus any jitter) with
// the end at nanosecond precision: t <= end-1ns is exactly t < end.
func backfillRange(start, end time.Time) client.ScheduleBackfill {
	return client.ScheduleBackfill{Start: start, End: end.Add(-time.Nanosecond), Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL}
}

// DeleteSchedule deletes the schedule; runs it started are not touched.
func (e *Client) DeleteSchedule(ctx context.Context, project, name string) error {
	if _, err := e.DescribeSchedule(ctx, project, name); err != nil {
		return err
	}
	err := e.c.ScheduleClient().GetHandle(ctx, ScheduleID(project, name)).Delete(ctx)
	return scheduleErr(err, project, name, "delete")
}

func scheduleErr(err error, project, name, op string) error {
	var nf *serviceerror.NotFound
	var invalid *serviceerror.InvalidArgument
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nf):
		return ErrScheduleNotFound
	case errors.As(err, &invalid):
		return &InvalidScheduleError{Message: invalid.Message}
	}
	return fmt.Errorf("runclient: %s schedule %s/%s: %w", op, project, name, err)
}

func memoOf(m *commonpb.Memo) (scheduleMemo, bool) {
	var out scheduleMemo
	p, ok := m.GetFields()["atelier"]
	if !ok {
		return out, false
	}
	return out, converter.GetDefaultDataConverter().FromPayload(p, &out) == nil
}
