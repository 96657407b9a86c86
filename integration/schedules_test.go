package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// Schedules over Temporal Schedules, through REST:
//   - bad input is a 422 naming the field (a cron Temporal refuses, an
//     unknown pipeline, an interval under 1s);
//   - every 1s with overlap skip, a 2.5 s run never overlaps the next:
//     starts are skipped and counted, and the runs are listed in REST with
//     the schedule that started them, though the gateway never started
//     them (each workflow writes its own catalogue row);
//   - pause stops it; a backfill of 10 intervals creates 10 runs; trigger
//     starts one now; another project sees nothing; delete removes it.
func TestSchedulesOnRealStack(t *testing.T) {
	s := newStack(t)
	dir := stepScratchDir(t)
	s.createPipeline("tick", fmt.Sprintf(`
steps:
  - name: work
    container: {command: ["sh", "-c", "echo start >> %[1]s/log; sleep 2.5; echo end >> %[1]s/log"]}
`, dir))
	s.createPipeline("quick", `
steps:
  - name: hello
    container: {command: ["true"]}
`)
	ctx, c := context.Background(), s.client()
	for _, bad := range []struct {
		body gen.ScheduleCreate
		path string
	}{
		{gen.ScheduleCreate{Name: "bad", Pipeline: "tick", Cron: &[]string{"61 * * * *"}}, "cron"},
		{gen.ScheduleCreate{Name: "bad", Pipeline: "nope", Every: &[]string{"1m"}}, "pipeline"},
		{gen.ScheduleCreate{Name: "bad", Pipeline: "tick", Every: &[]string{"500ms"}}, "every[0]"},
		{gen.ScheduleCreate{Name: "bad", Pipeline: "tick"}, "cron"},
	} {
		res, err := c.CreateScheduleWithResponse(ctx, s.project, bad.body)
		require.NoError(t, err)
		require.Equal(t, 422, res.StatusCode(), "%+v: %s", bad.body, res.Body)
		p := res.ApplicationproblemJSON422
		require.NotNil(t, p)
		require.NotNil(t, p.Errors)
		assert.Equal(t, bad.path, (*p.Errors)[0].Path, "%s", deref2(p.Detail))
	}

	created, err := c.CreateScheduleWithResponse(ctx, s.project, gen.ScheduleCreate{
		Name: "tick", Pipeline: "tick", Every: &[]string{"1s"}, Overlap: ptrTo(gen.Skip)})
	require.NoError(t, err)
	require.Equal(t, 201, created.StatusCode(), "%s", created.Body)
	sc := *created.JSON201
	assert.Equal(t, 1, sc.Version)
	assert.Equal(t, gen.Skip, sc.Overlap)
	dup, err := c.CreateScheduleWithResponse(ctx, s.project, gen.ScheduleCreate{Name: "tick", Pipeline: "tick", Every: &[]string{"1s"}})
	require.NoError(t, err)
	require.Equal(t, 409, dup.StatusCode(), "%s", dup.Body)

	// Let it run about three runs' worth, then pause.
	time.Sleep(8 * time.Second)
	paused, err := c.PauseScheduleWithResponse(ctx, s.project, "tick", gen.ScheduleNote{Note: ptrTo("maintenance")})
	require.NoError(t, err)
	require.Equal(t, 200, paused.StatusCode(), "%s", paused.Body)
	sc = *paused.JSON200
	assert.True(t, sc.Paused)
	assert.Equal(t, "maintenance", deref2(sc.Note))
	assert.Positive(t, sc.SkippedOverlap, "starts were skipped while a run was running")
	require.NotEmpty(t, sc.RecentRuns)
	// The last run finishes; the log then alternates start/end: never two
	// runs at once.
	time.Sleep(3 * time.Second)
	b, err := os.ReadFile(filepath.Join(dir, "log"))
	require.NoError(t, err)
	lines := strings.Fields(string(b))
	require.GreaterOrEqual(t, len(lines), 4, "at least two runs: %q", lines)
	for i, l := range lines {
		want := map[bool]string{true: "start", false: "end"}[i%2 == 0]
		require.Equal(t, want, l, "runs overlapped: %q", lines)
	}
	// A scheduled run is an ordinary run in REST.
	first := sc.RecentRuns[0].RunId
	r := s.waitTerminal(first, 30*time.Second)
	assert.Equal(t, "tick", deref2(r.Status.ScheduleId))
	assert.Equal(t, "tick", deref2(r.Status.Pipeline))

	// Backfill 10 intervals of a paused every-minute schedule (a backfill
	// and a trigger are asked for explicitly: pause does not stop them).
	created, err = c.CreateScheduleWithResponse(ctx, s.project, gen.ScheduleCreate{
		Name: "daily", Pipeline: "quick", Every: &[]string{"1m"}, Paused: ptrTo(true)})
	require.NoError(t, err)
	require.Equal(t, 201, created.StatusCode(), "%s", created.Body)
	start := time.Now().UTC().Truncate(time.Minute).Add(-10*time.Minute + 30*time.Second)
	backfill, err := c.BackfillScheduleWithResponse(ctx, s.project, "daily", gen.ScheduleBackfillRequest{
		Start: start, End: start.Add(10 * time.Minute)})
	require.NoError(t, err)
	require.Equal(t, 200, backfill.StatusCode(), "%s", backfill.Body)
	waitRuns := func(n int) []string {
		var ids []string
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
			ids = ids[:0]
			for _, r := range s.listRuns(gen.ListRunsParams{Pipeline: ptrTo("quick"), PageSize: ptrTo(100)}) {
				if r.State == gen.RunStateSUCCEEDED {
					ids = append(ids, r.Id)
				}
			}
			if len(ids) >= n {
				return ids
			}
		}
		t.Fatalf("%d runs of the backfill succeeded, want %d", len(ids), n)
		return nil
	}
	ids := waitRuns(10)
	assert.Len(t, ids, 10, "a backfill of 10 intervals creates 10 runs")
	trigger, err := c.TriggerScheduleWithResponse(ctx, s.project, "daily")
	require.NoError(t, err)
	require.Equal(t, 200, trigger.StatusCode(), "%s", trigger.Body)
	waitRuns(11)

	list, err := c.ListSchedulesWithResponse(ctx, s.project)
	require.NoError(t, err)
	require.Equal(t, 200, list.StatusCode(), "%s", list.Body)
	require.Len(t, list.JSON200.Items, 2)
	assert.Equal(t, "daily", list.JSON200.Items[0].Name)

	other := s.asProject("team-b")
	oc := other.client()
	get, err := oc.GetScheduleWithResponse(ctx, other.project, "tick")
	require.NoError(t, err)
	require.Equal(t, 404, get.StatusCode())
	otherList, err := oc.ListSchedulesWithResponse(ctx, other.project)
	require.NoError(t, err)
	require.Equal(t, 200, otherList.StatusCode(), "%s", otherList.Body)
	assert.Empty(t, otherList.JSON200.Items)
	get, err = c.GetScheduleWithResponse(ctx, other.project, "tick")
	require.NoError(t, err)
	require.Equal(t, 404, get.StatusCode(), "a project's token cannot reach another's schedules")

	for _, name := range []string{"tick", "daily"} {
		del, err := c.DeleteScheduleWithResponse(ctx, s.project, name)
		require.NoError(t, err)
		require.Equal(t, 204, del.StatusCode(), "%s", del.Body)
	}
	get, err = c.GetScheduleWithResponse(ctx, s.project, "tick")
	require.NoError(t, err)
	require.Equal(t, 404, get.StatusCode())
}

func deref2(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// A backfill covers [start, end): over five one-minute intervals whose
// bounds both fall on the schedule's times, it starts exactly the five runs
// scheduled at start, start+1m, ... start+4m, not one at end (Temporal's
// own backfill range includes its end; the gateway passes it a range that
// stops just before).
func TestScheduleBackfillIsHalfOpen(t *testing.T) {
	s := newStack(t)
	s.createPipeline("quick", `
steps:
  - name: hello
    container: {command: ["true"]}
`)
	ctx, c := context.Background(), s.client()
	created, err := c.CreateScheduleWithResponse(ctx, s.project, gen.ScheduleCreate{
		Name: "minutely", Pipeline: "quick", Every: &[]string{"1m"}, Paused: ptrTo(true)})
	require.NoError(t, err)
	require.Equal(t, 201, created.StatusCode(), "%s", created.Body)
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	end := start.Add(5 * time.Minute)
	backfill, err := c.BackfillScheduleWithResponse(ctx, s.project, "minutely", gen.ScheduleBackfillRequest{Start: start, End: end})
	require.NoError(t, err)
	require.Equal(t, 200, backfill.StatusCode(), "%s", backfill.Body)

	var runs []gen.Run
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		runs = s.listRuns(gen.ListRunsParams{Schedule: ptrTo("minutely"), PageSize: ptrTo(100)})
		done := 0
		for _, r := range runs {
			if terminal(r.State) {
				done++
			}
		}
		if done >= 5 && done == len(runs) {
			break
		}
	}
	// Give a sixth start the time to show if there were one: the schedule
	// buffers every start of a backfill at once.
	time.Sleep(3 * time.Second)
	get, err := c.GetScheduleWithResponse(ctx, s.project, "minutely")
	require.NoError(t, err)
	require.Equal(t, 200, get.StatusCode(), "%s", get.Body)
	var scheduled []time.Time
	for _, r := range get.JSON200.RecentRuns {
		scheduled = append(scheduled, r.ScheduledAt.UTC())
	}
	slices.SortFunc(scheduled, time.Time.Compare)
	want := []time.Time{start, start.Add(time.Minute), start.Add(2 * time.Minute), start.Add(3 * time.Minute), start.Add(4 * time.Minute)}
	assert.Equal(t, want, scheduled, "the runs of [start, end)")
	assert.Equal(t, 5, get.JSON200.Actions, "runs started")
	var ids []string
	for _, r := range s.listRuns(gen.ListRunsParams{Schedule: ptrTo("minutely"), PageSize: ptrTo(100)}) {
		ids = append(ids, r.Id)
	}
	assert.Len(t, ids, 5, "runs listed: %v", ids)
	// The schedule's creator started them: the runs list finds them by
	// createdBy, as Temporal does by AtelierCreatedBy.
	byCreator := s.listRuns(gen.ListRunsParams{CreatedBy: ptrTo("ci-editor"), PageSize: ptrTo(100)})
	assert.Len(t, byCreator, 5, "scheduled runs by their creator")
	for _, r := range byCreator {
		assert.Equal(t, "ci-editor", val(r.CreatedBy))
	}
}
