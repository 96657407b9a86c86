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

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// The schedules page in a real browser against a real stack (Temporal
// Schedules on the dev server): two schedules made through REST are
// listed with their target, timetable and next start times (the ones
// REST gives); pausing one with a note shows it paused with the note
// (kept as text) and REST agrees; unpausing it too; Trigger now starts a
// run that the page names and links, which links back to its schedule,
// and the schedule's runs are the runs list filtered by it; a backfill
// whose end is before its start shows the gateway's 422 at the end field
// and starts nothing, and a backfill of three hours starts the three
// hourly runs of [start, end). Any script error or CSP violation fails
// the test (but the refused backfill's own 422).
//
// ATELIER_UI_SCREENSHOTS=<dir> writes docs/img/ui-schedules.png (see
// TestWebUIRunPageInBrowser).
func TestWebUISchedulesInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a Temporal dev server and Chromium")
	}
	path := chromiumPath(t)
	s := newStack(t)
	ctx, c := context.Background(), s.client()
	s.createPipeline("report", `
description: A report on a dataset.
params:
  - {name: dataset, type: string, default: iris}
steps:
  - name: report
    container:
      command: [sh, -c, 'echo "report on $DATASET"']
      env: {DATASET: "{{ params.dataset }}"}
`)
	create := func(body gen.ScheduleCreate) {
		t.Helper()
		res, err := c.CreateScheduleWithResponse(ctx, s.project, body)
		require.NoError(t, err)
		require.Equal(t, 201, res.StatusCode(), "%s", res.Body)
		t.Cleanup(func() { _, _ = c.DeleteScheduleWithResponse(context.Background(), s.project, body.Name) })
	}
	create(gen.ScheduleCreate{Name: "nightly", Pipeline: "report", Params: &map[string]any{"dataset": "mnist"},
		Cron: &[]string{"0 2 * * *"}, TimeZone: ptrTo("Europe/Paris"), Overlap: ptrTo(gen.Skip)})
	create(gen.ScheduleCreate{Name: "hourly", Pipeline: "report", Every: &[]string{"1h"}, Paused: ptrTo(true), Note: ptrTo("waiting for the new dataset")})
	getSchedule := func(name string) gen.Schedule {
		t.Helper()
		res, err := c.GetScheduleWithResponse(ctx, s.project, name)
		require.NoError(t, err)
		require.Equal(t, 200, res.StatusCode(), "%s", res.Body)
		return *res.JSON200
	}

	br := newBrowser(t, path)
	shots := os.Getenv("ATELIER_UI_SCREENSHOTS")
	card := func(name string) string { return fmt.Sprintf(`.schedule[data-schedule=%q]`, name) }
	br.run(t, "log in and open the schedules",
		// The backfill form reads times in the browser's zone: UTC, as the test writes them.
		emulation.SetTimezoneOverride("UTC"),
		chromedp.Navigate(s.url+"/ui/"),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, s.token, chromedp.ByQuery),
		chromedp.Click(`#login`, chromedp.ByQuery),
		chromedp.WaitVisible(`#nav-schedules`, chromedp.ByQuery),
		chromedp.Click(`#nav-schedules`, chromedp.ByQuery),
		chromedp.WaitVisible(card("nightly")+` ol.next-runs li`, chromedp.ByQuery),
		chromedp.WaitVisible(card("hourly"), chromedp.ByQuery),
	)
	type cardView struct {
		State, Target, Timetable, Overlap, PausedNote, Note string
		Next                                                []string
		Buttons                                             []string
	}
	read := func(name string) cardView {
		t.Helper()
		var v cardView
		br.run(t, "read the schedule "+name, chromedp.Evaluate(fmt.Sprintf(`(() => {
			const c = document.querySelector(%q);
			const text = (sel) => c.querySelector(sel)?.textContent ?? "";
			const dd = (label) => [...c.querySelectorAll("dl.meta dt")].find(dt => dt.textContent === label)?.nextElementSibling?.textContent ?? "";
			return {
				state: c.querySelector(".schedule-head .badge").dataset.state,
				target: text(".schedule-target"),
				timetable: dd("Timetable"),
				overlap: dd("Overlap"),
				pausedNote: text(".paused-note"),
				note: text(".schedule-note"),
				next: [...c.querySelectorAll("ol.next-runs li")].map(li => li.dataset.at),
				buttons: [...c.querySelectorAll(".schedule-head button")].filter(b => !b.hidden).map(b => b.textContent),
			};
		})()`, card(name)), &v))
		return v
	}

	// The list: each schedule's target, timetable, state and next runs
	// (the first five REST gives).
	nightly := read("nightly")
	assert.Equal(t, "ACTIVE", nightly.State)
	assert.Equal(t, "report v1", nightly.Target)
	assert.Contains(t, nightly.Overlap, "skip")
	assert.Equal(t, []string{"Pause", "Trigger now", "Backfill…"}, nightly.Buttons)
	rest := getSchedule("nightly")
	// REST gives the expressions as written (Temporal describes them as
	// calendars; the gateway keeps them in the schedule's memo).
	assert.Equal(t, []string{"0 2 * * *"}, val(rest.Cron))
	assert.Equal(t, "cron 0 2 * * * (time zone Europe/Paris)", nightly.Timetable)
	require.GreaterOrEqual(t, len(rest.NextRuns), 5, "REST gives the next runs")
	require.Len(t, nightly.Next, 5)
	for i, at := range nightly.Next {
		got, err := time.Parse(time.RFC3339, at)
		require.NoError(t, err)
		assert.True(t, rest.NextRuns[i].Equal(got), "next run %d: page %s, REST %s", i, at, rest.NextRuns[i])
		paris, _ := time.LoadLocation("Europe/Paris")
		assert.Equal(t, "02:00", got.In(paris).Format("15:04"), "cron in its time zone")
	}
	hourly := read("hourly")
	assert.Equal(t, "PAUSED", hourly.State)
	assert.Equal(t, "Paused: waiting for the new dataset", hourly.PausedNote)
	assert.Equal(t, "every 1h", hourly.Timetable, "REST says 1h0m0s")
	assert.Equal(t, []string{"Unpause", "Trigger now", "Backfill…"}, hourly.Buttons)

	// Pause with a note: the page shows it paused with the note, as text.
	const note = "upstream data late <b>"
	br.run(t, "pause with a note",
		chromedp.Click(card("nightly")+` button.open-pause`, chromedp.ByQuery),
		chromedp.WaitVisible(card("nightly")+` .pause-form input.pause-note`, chromedp.ByQuery),
		chromedp.SendKeys(card("nightly")+` input.pause-note`, note, chromedp.ByQuery),
		chromedp.Click(card("nightly")+` button.confirm-pause`, chromedp.ByQuery),
		chromedp.WaitVisible(card("nightly")+` .schedule-head .badge[data-state="PAUSED"]`, chromedp.ByQuery),
		br.waitText(card("nightly")+` .paused-note`, note),
		chromedp.WaitNotVisible(card("nightly")+` .pause-form`, chromedp.ByQuery),
	)
	nightly = read("nightly")
	assert.Equal(t, "Paused: "+note, nightly.PausedNote)
	assert.Equal(t, []string{"Unpause", "Trigger now", "Backfill…"}, nightly.Buttons)
	var markup int
	br.run(t, "the note is text", chromedp.Evaluate(fmt.Sprintf(`document.querySelectorAll(%q).length`, card("nightly")+` .paused-note b`), &markup))
	assert.Zero(t, markup, "a note's markup stays text")
	rest = getSchedule("nightly")
	assert.True(t, rest.Paused)
	assert.Equal(t, note, val(rest.Note))

	// Unpause (without a note: the gateway's default says who).
	br.run(t, "unpause",
		chromedp.Click(card("nightly")+` button.open-unpause`, chromedp.ByQuery),
		chromedp.WaitVisible(card("nightly")+` .unpause-form`, chromedp.ByQuery),
		chromedp.Click(card("nightly")+` button.confirm-unpause`, chromedp.ByQuery),
		chromedp.WaitVisible(card("nightly")+` .schedule-head .badge[data-state="ACTIVE"]`, chromedp.ByQuery),
		br.waitText(card("nightly")+` .schedule-note`, "unpaused through REST by ci-editor"),
	)
	rest = getSchedule("nightly")
	assert.False(t, rest.Paused)
	assert.Equal(t, "unpaused through REST by ci-editor", val(rest.Note))
	assert.Empty(t, read("nightly").PausedNote)

	// Trigger now: the run it started is named and linked, and succeeds.
	var triggerText, runID string
	br.run(t, "trigger now",
		chromedp.Click(card("nightly")+` button.open-trigger`, chromedp.ByQuery),
		chromedp.WaitVisible(card("nightly")+` .trigger-form`, chromedp.ByQuery),
		chromedp.Text(card("nightly")+` .trigger-form .form-text`, &triggerText, chromedp.ByQuery),
		chromedp.Click(card("nightly")+` button.confirm-trigger`, chromedp.ByQuery),
		chromedp.WaitVisible(card("nightly")+` a.triggered-run`, chromedp.ByQuery),
		chromedp.Text(card("nightly")+` a.triggered-run`, &runID, chromedp.ByQuery),
	)
	assert.Contains(t, triggerText, "Start a run of nightly now? Its overlap policy applies (skip")
	require.NotEmpty(t, runID)
	run := s.waitTerminal(runID, time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, run.State, "%s", val(run.Status.Error))
	assert.Equal(t, "nightly", val(run.Status.ScheduleId))
	assert.Equal(t, map[string]any{"dataset": "mnist"}, *run.Status.Params)
	br.run(t, "the run in the schedule's recent runs",
		chromedp.WaitVisible(fmt.Sprintf(`%s .recent-runs tr[data-run=%q] .badge[data-state="SUCCEEDED"]`, card("nightly"), runID), chromedp.ByQuery),
	)
	if rest = getSchedule("nightly"); assert.Len(t, rest.RecentRuns, 1) {
		assert.Equal(t, runID, rest.RecentRuns[0].RunId)
	}
	assert.Equal(t, 1, rest.Actions)

	// The run's page, and back to its schedule; the schedule's runs.
	var scheduleLink string
	var listed []string
	br.run(t, "open the triggered run",
		chromedp.Click(card("nightly")+` a.triggered-run`, chromedp.ByQuery),
		chromedp.WaitVisible(`#run-state[data-state="SUCCEEDED"]`, chromedp.ByQuery),
		chromedp.Text(`#schedule-link`, &scheduleLink, chromedp.ByQuery),
		chromedp.Click(`#schedule-link`, chromedp.ByQuery),
		chromedp.WaitVisible(`.schedule.focused[data-schedule="nightly"]`, chromedp.ByQuery),
		chromedp.Click(card("nightly")+` a.all-runs`, chromedp.ByQuery),
		chromedp.WaitVisible(`#filter-schedule`, chromedp.ByQuery),
		chromedp.WaitVisible(fmt.Sprintf(`#runs tr[data-run=%q]`, runID), chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll("#runs tbody tr")].map(r => r.dataset.run)`, &listed),
	)
	assert.Equal(t, "nightly", scheduleLink)
	assert.Equal(t, []string{runID}, listed, "the runs list filtered by the schedule")

	// A backfill the gateway refuses: its problem at the field, no run.
	br.run(t, "back to the schedules",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/schedules"),
		chromedp.WaitVisible(card("hourly")+` button.open-backfill`, chromedp.ByQuery),
	)
	var startMsg, endMsg, formMsg string
	br.run(t, "a backfill without a start",
		chromedp.Click(card("hourly")+` button.open-backfill`, chromedp.ByQuery),
		chromedp.WaitVisible(card("hourly")+` .backfill-form input.backfill-start`, chromedp.ByQuery),
		setInput(card("hourly")+` input.backfill-end`, "2025-03-01T00:00:00"),
		chromedp.Click(card("hourly")+` button.confirm-backfill`, chromedp.ByQuery),
		br.waitText(card("hourly")+` .start-error`, "give a date and time"),
	)
	br.run(t, "a backfill whose end is before its start",
		setInput(card("hourly")+` input.backfill-start`, "2025-03-02T00:00:00"),
		chromedp.Click(card("hourly")+` button.confirm-backfill`, chromedp.ByQuery),
		br.waitText(card("hourly")+` .end-error`, "must be after start"),
		chromedp.Text(card("hourly")+` .end-error`, &endMsg, chromedp.ByQuery),
		chromedp.Text(card("hourly")+` .backfill-form .form-error`, &formMsg, chromedp.ByQuery),
		chromedp.Evaluate(fmt.Sprintf(`document.querySelector(%q).hidden ? "" : document.querySelector(%q).textContent`, card("hourly")+` .start-error`, card("hourly")+` .start-error`), &startMsg),
	)
	assert.Equal(t, "must be after start", endMsg)
	assert.Contains(t, formMsg, "Backfill refused")
	assert.Contains(t, formMsg, "HTTP 422")
	assert.Empty(t, startMsg, "only the end is wrong")
	assert.Empty(t, s.listRuns(gen.ListRunsParams{Schedule: ptrTo("hourly")}), "a refused backfill starts nothing")

	// A backfill of three hours: the three runs of [start, end), the one
	// due at end excluded, even though the schedule is paused.
	start := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	end := start.Add(3 * time.Hour)
	const local = "2006-01-02T15:04:05"
	var flash string
	br.run(t, "a backfill of three hours",
		setInput(card("hourly")+` input.backfill-start`, start.Format(local)),
		setInput(card("hourly")+` input.backfill-end`, end.Format(local)),
		chromedp.Click(card("hourly")+` button.confirm-backfill`, chromedp.ByQuery),
		chromedp.WaitNotVisible(card("hourly")+` .backfill-form`, chromedp.ByQuery),
		chromedp.Text(card("hourly")+` .schedule-flash`, &flash, chromedp.ByQuery),
	)
	assert.Contains(t, flash, "Backfill sent")
	var runs []gen.Run
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		runs = s.listRuns(gen.ListRunsParams{Schedule: ptrTo("hourly")})
		if len(runs) == 3 && !slices.ContainsFunc(runs, func(r gen.Run) bool { return r.State != gen.RunStateSUCCEEDED }) {
			break
		}
	}
	require.Len(t, runs, 3, "a backfill of three hourly intervals")
	var ids []string
	for _, r := range runs {
		assert.Equal(t, gen.RunStateSUCCEEDED, r.State, r.Id)
		ids = append(ids, r.Id)
	}
	br.run(t, "the backfilled runs on the page",
		chromedp.Poll(fmt.Sprintf(`[...document.querySelectorAll(%q)].length === 3`, card("hourly")+` .recent-runs tr[data-run] .badge[data-state="SUCCEEDED"]`), nil, chromedp.WithPollingTimeout(30*time.Second)),
	)
	var shown []string
	var scheduledFor []string
	br.run(t, "read the backfilled runs", chromedp.Evaluate(fmt.Sprintf(`[...document.querySelectorAll(%q)].map(r => r.dataset.run)`, card("hourly")+` .recent-runs tr[data-run]`), &shown),
		chromedp.Evaluate(fmt.Sprintf(`[...document.querySelectorAll(%q)].map(r => r.children[2].textContent)`, card("hourly")+` .recent-runs tr[data-run]`), &scheduledFor))
	assert.ElementsMatch(t, ids, shown)
	slices.Sort(scheduledFor)
	assert.Equal(t, []string{start.Format("2006-01-02 15:04:05"), start.Add(time.Hour).Format("2006-01-02 15:04:05"), start.Add(2 * time.Hour).Format("2006-01-02 15:04:05")}, scheduledFor,
		"scheduled for start, +1h, +2h (UTC in the browser); not end")
	assert.Equal(t, "PAUSED", read("hourly").State, "a backfill leaves the schedule paused")

	if shots != "" {
		br.run(t, "the schedules for a screenshot",
			chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/schedules"),
			chromedp.WaitVisible(card("hourly")+` .recent-runs tr[data-run]`, chromedp.ByQuery),
			chromedp.WaitVisible(card("nightly")+` .recent-runs tr[data-run]`, chromedp.ByQuery),
		)
		br.screenshot(t, filepath.Join(shots, "ui-schedules.png"))
	}

	// The refused backfill's 422 is the only error the browser logged.
	br.noPageErrorsBut(t, func(e string) bool {
		return strings.Contains(e, "/schedules/hourly/backfill") && strings.Contains(e, "status of 422")
	})
}

// setInput types a value into an input as a user would (chromedp.SetValue
// cannot set a datetime-local input): the value, then an input event. It
// fails when the input does not take the value.
func setInput(sel, value string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var got string
		if err := chromedp.Evaluate(fmt.Sprintf(`(() => {
			const el = document.querySelector(%q);
			el.value = %q;
			el.dispatchEvent(new Event("input", {bubbles: true}));
			return el.value;
		})()`, sel, value), &got).Do(ctx); err != nil {
			return err
		}
		if value != "" && got == "" {
			return fmt.Errorf("%s did not take the value %q", sel, value)
		}
		return nil
	})
}

// noPageErrorsBut is noPageErrors for a page that was refused on purpose:
// the errors expected (the browser logs a refused request) are left out.
func (b *browser) noPageErrorsBut(t *testing.T, expected func(string) bool) {
	t.Helper()
	var unexpected []string
	for _, e := range b.pageErrors() {
		if !expected(e) {
			unexpected = append(unexpected, e)
		}
	}
	assert.Empty(t, unexpected, "script errors, failed loads or CSP violations on the pages")
}
