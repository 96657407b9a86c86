package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

// The web UI offers what the signed-in token's role allows, in a real
// browser against a real stack. An admin (made outside the API, as `atelier
// dev` does) creates a viewer and an editor of the project through REST.
// Signed in as the viewer, the top bar names it and its role; the page of
// a running run offers no Cancel (and its approval step, which editors
// decide, no Approve), a failed run's no Retry nor Run again, the
// pipelines no Run, the launch form says it needs an editor, the
// schedules no Unpause / Trigger now / Backfill, the cache no Evict, the
// triggers no New trigger nor Disable / Delete, and the webhooks page says
// webhooks need an editor without asking the gateway; no request the
// gateway refuses is sent (the browser logs none), while the same
// requests through REST with the viewer's token are still refused (403).
// After Log out, the editor signs in in the same tab: the top bar names it
// and every one of those actions is offered. The admin's role is shown too.
//
// ATELIER_UI_SCREENSHOTS=<dir> writes docs/img/ui-roles-viewer.png (see
// TestWebUIRunPageInBrowser).
func TestWebUIRolesInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a Temporal dev server and Chromium")
	}
	path := chromiumPath(t)
	s := newStack(t)
	ctx := context.Background()

	adminSecret, hash := tokens.New()
	_, err := s.store.CreateToken(ctx, catalog.Token{Name: "ci-admin", Role: tokens.RoleAdmin}, hash)
	require.NoError(t, err)
	admin := s.clientAs(adminSecret)
	mint := func(name string, role gen.CreateTokenRequestRole) string {
		t.Helper()
		res, err := admin.CreateTokenWithResponse(ctx, s.project, gen.CreateTokenRequest{Name: name, Role: role})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode(), "%s", res.Body)
		return res.JSON201.Secret
	}
	viewer := mint("ci-viewer", gen.CreateTokenRequestRoleViewer)
	editor := mint("ml-editor", gen.CreateTokenRequestRoleEditor)
	for secret, want := range map[string]gen.Role{viewer: gen.RoleViewer, editor: gen.RoleEditor, adminSecret: gen.RoleAdmin} {
		me, err := s.clientAs(secret).WhoamiWithResponse(ctx)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, me.StatusCode(), "%s", me.Body)
		assert.Equal(t, want, me.JSON200.Role)
	}

	// A run that stays RUNNING with an approval step waiting (editors
	// decide it), a failed run, a cached step's entry, a paused schedule
	// and a trigger.
	s.createPipeline("hold", `
steps:
  - name: wait
    container: {command: [sh, -c, 'echo holding; sleep 300']}
  - name: gate
    kind: approval
    approval: {message: "ship it?"}
`)
	s.createPipeline("ok", `
steps:
  - name: prep
    cache: {}
    container: {command: [sh, -c, 'printf "{\"rows\": 3}" > "$ATELIER_OUTPUTS"']}
`)
	s.createPipeline("flaky", `
steps:
  - name: fetch
    container: {command: [sh, -c, 'echo "connection refused" >&2; exit 3']}
`)
	holdID := s.start("hold", nil)
	t.Cleanup(func() {
		_, _ = s.client().CancelRunWithResponse(context.Background(), s.project, holdID, gen.CancelRunRequest{})
	})
	okRun := s.waitTerminal(s.start("ok", nil), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, okRun.State, "%s", val(okRun.Status.Error))
	failed := s.waitTerminal(s.start("flaky", nil), time.Minute)
	require.Equal(t, gen.RunStateFAILED, failed.State)
	c := s.client()
	sched, err := c.CreateScheduleWithResponse(ctx, s.project, gen.ScheduleCreate{Name: "nightly", Pipeline: "ok", Cron: &[]string{"0 2 * * *"}, Paused: ptrTo(true), Note: ptrTo("until the dataset lands")})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, sched.StatusCode(), "%s", sched.Body)
	t.Cleanup(func() { _, _ = s.client().DeleteScheduleWithResponse(context.Background(), s.project, "nightly") })
	trig, err := c.CreateTriggerWithResponse(ctx, s.project, gen.TriggerCreate{Name: "after-flaky", On: gen.TriggerOn{RunFinished: &gen.TriggerRunFinished{Pipeline: "flaky"}}, Pipeline: "ok"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, trig.StatusCode(), "%s", trig.Body)
	s.waitStepState(holdID, "gate", gen.StepStateWAITINGFORAPPROVAL)
	entries, err := c.ListCacheEntriesWithResponse(ctx, s.project, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, entries.StatusCode(), "%s", entries.Body)
	require.Len(t, entries.JSON200.Entries, 1, "ok's prep stored its entry")
	cacheKey := entries.JSON200.Entries[0].Key

	b := newBrowser(t, path)
	shots := os.Getenv("ATELIER_UI_SCREENSHOTS")
	ui := s.url + "/ui/#/p/" + s.project
	// shown: some element matching sel is rendered (present and not hidden).
	shown := func(sel string) bool {
		t.Helper()
		var ok bool
		b.run(t, "is "+sel+" shown", chromedp.Evaluate(fmt.Sprintf(`[...document.querySelectorAll(%q)].some(e => e.getClientRects().length > 0)`, sel), &ok))
		return ok
	}
	topBar := func() (name, role string) {
		t.Helper()
		b.run(t, "read the top bar",
			chromedp.WaitVisible(`#whoami`, chromedp.ByQuery),
			chromedp.Text(`#whoami-name`, &name, chromedp.ByQuery),
			chromedp.Text(`#whoami-role`, &role, chromedp.ByQuery),
		)
		return name, role
	}
	// offered checks every page: an editor is offered each action, a viewer none (and is told why).
	offered := func(who string, edit bool) {
		t.Helper()
		check := func(sel string, want bool) {
			t.Helper()
			assert.Equal(t, want, shown(sel), "%s: %s shown", who, sel)
		}

		b.run(t, who+": the running run's page",
			chromedp.Navigate(ui+"/runs/"+holdID),
			chromedp.WaitVisible(`#run-state[data-state="RUNNING"]`, chromedp.ByQuery),
			chromedp.WaitVisible(`g.node[data-step="gate"][data-state="WAITING_FOR_APPROVAL"]`, chromedp.ByQuery),
		)
		check(`#cancel-run`, edit)
		check(`#run-role-note`, !edit)
		b.run(t, who+": the approval step's drawer",
			chromedp.Click(`g.node[data-step="gate"]`, chromedp.ByQuery),
			chromedp.WaitVisible(`#drawer .approval.waiting`, chromedp.ByQuery),
		)
		check(`#approve`, edit)
		check(`#reject`, edit)
		check(`#approval-role-note`, !edit)
		if !edit && shots != "" {
			b.screenshot(t, filepath.Join(shots, "ui-roles-viewer.png"))
		}

		b.run(t, who+": the failed run's page",
			chromedp.Navigate(ui+"/runs/"+failed.Id),
			chromedp.WaitVisible(`#run-state[data-state="FAILED"]`, chromedp.ByQuery),
			chromedp.WaitReady(`section.run[data-live="ended"]`, chromedp.ByQuery),
		)
		check(`#retry-run`, edit)
		check(`#run-again`, edit)
		check(`#cancel-run`, false)

		b.run(t, who+": the pipelines",
			chromedp.Navigate(ui+"/pipelines"),
			chromedp.WaitVisible(`#pipelines`, chromedp.ByQuery),
		)
		check(`#pipelines a[data-launch]`, edit)
		check(`#pipelines-role-note`, !edit)
		b.run(t, who+": a pipeline version",
			chromedp.Navigate(ui+"/pipelines/ok"),
			chromedp.WaitVisible(`#spec`, chromedp.ByQuery),
		)
		check(`#launch`, edit)
		b.run(t, who+": the launch form's URL",
			chromedp.Navigate(ui+"/pipelines/ok/versions/1/run"),
			chromedp.WaitVisible(`#launch-form, #launch-role-note`, chromedp.ByQuery),
		)
		check(`#launch-form`, edit)
		check(`#launch-role-note`, !edit)

		card := `.schedule[data-schedule="nightly"]`
		b.run(t, who+": the schedules",
			chromedp.Navigate(ui+"/schedules"),
			chromedp.WaitVisible(card+` .paused-note`, chromedp.ByQuery),
		)
		check(card+` .open-unpause`, edit)
		check(card+` .open-trigger`, edit)
		check(card+` .open-backfill`, edit)
		check(`#schedules-role-note`, !edit)

		b.run(t, who+": the cache",
			chromedp.Navigate(ui+"/cache"),
			chromedp.WaitVisible(fmt.Sprintf(`#cache tr[data-key=%q]`, cacheKey), chromedp.ByQuery),
		)
		check(`#cache button.evict`, edit)
		check(`#evict-all`, edit)
		check(`#cache-role-note`, !edit)

		b.run(t, who+": the triggers",
			chromedp.Navigate(ui+"/triggers"),
			chromedp.WaitVisible(`#triggers tr[data-trigger="after-flaky"]`, chromedp.ByQuery),
		)
		check(`#new-trigger`, edit)
		check(`#triggers-role-note`, !edit)
		b.run(t, who+": a trigger's page",
			chromedp.Navigate(ui+"/triggers/after-flaky"),
			chromedp.WaitVisible(`#trigger-name`, chromedp.ByQuery),
		)
		check(`#toggle-enabled`, edit)
		check(`#delete-trigger`, edit)
		check(`#trigger-role-note`, !edit)

		b.run(t, who+": the webhooks",
			chromedp.Navigate(ui+"/webhooks"),
			chromedp.WaitVisible(`#no-webhooks, #webhooks-role-note`, chromedp.ByQuery),
		)
		check(`#no-webhooks`, edit)
		check(`#webhooks-role-note`, !edit)
	}

	// The viewer.
	b.signIn(t, s.url, viewer)
	name, role := topBar()
	assert.Equal(t, "ci-viewer", name)
	assert.Equal(t, "viewer", role)
	offered("viewer", false)
	var note string
	b.run(t, "what the webhooks page tells a viewer", chromedp.Text(`#webhooks-role-note`, &note, chromedp.ByQuery))
	assert.Contains(t, note, "Reading webhooks needs an editor token of this project (or an admin's); this token (ci-viewer) is a viewer.")
	// Nothing the gateway refuses was asked: the browser logged no error.
	b.noPageErrors(t)

	// The gateway still refuses the viewer's requests: the UI hides, REST decides.
	vc := s.clientAs(viewer)
	refused := func(what string, code int, body []byte) {
		t.Helper()
		assert.Equal(t, http.StatusForbidden, code, "viewer's %s: %s", what, body)
	}
	cancel, err := vc.CancelRunWithResponse(ctx, s.project, holdID, gen.CancelRunRequest{})
	require.NoError(t, err)
	refused("cancel", cancel.StatusCode(), cancel.Body)
	retry, err := vc.RetryRunWithResponse(ctx, s.project, failed.Id, gen.RetryRunRequest{})
	require.NoError(t, err)
	refused("retry", retry.StatusCode(), retry.Body)
	start, err := vc.CreateRunWithResponse(ctx, s.project, nil, gen.CreateRunRequest{Pipeline: ptrTo("ok")})
	require.NoError(t, err)
	refused("run", start.StatusCode(), start.Body)
	code, _, body := s.decide(holdID, "gate", "approve", viewer, nil)
	refused("approve", code, []byte(body))
	evict, err := vc.EvictCacheEntryWithResponse(ctx, s.project, cacheKey)
	require.NoError(t, err)
	refused("evict", evict.StatusCode(), evict.Body)
	trigger, err := vc.TriggerScheduleWithResponse(ctx, s.project, "nightly")
	require.NoError(t, err)
	refused("schedule trigger", trigger.StatusCode(), trigger.Body)
	disable, err := vc.UpdateTriggerWithResponse(ctx, s.project, "after-flaky", gen.TriggerUpdate{Enabled: false})
	require.NoError(t, err)
	refused("trigger disable", disable.StatusCode(), disable.Body)
	hooks, err := vc.ListWebhooksWithResponse(ctx, s.project)
	require.NoError(t, err)
	refused("webhooks list", hooks.StatusCode(), hooks.Body)
	assert.Equal(t, gen.RunStateRUNNING, s.getRun(holdID).State, "the hold run still runs")

	// Log out; the editor signs in in the same tab and is offered everything.
	b.run(t, "log out",
		chromedp.Click(`#logout`, chromedp.ByQuery),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
	)
	b.signIn(t, s.url, editor)
	name, role = topBar()
	assert.Equal(t, "ml-editor", name)
	assert.Equal(t, "editor", role)
	offered("editor", true)
	b.noPageErrors(t)

	// An admin token (every project) is named with its role too.
	b.run(t, "log out", chromedp.Click(`#logout`, chromedp.ByQuery), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	b.signIn(t, s.url, adminSecret)
	name, role = topBar()
	assert.Equal(t, "ci-admin", name)
	assert.Equal(t, "admin", role)
	b.run(t, "admin: the running run's page",
		chromedp.Navigate(ui+"/runs/"+holdID),
		chromedp.WaitVisible(`#run-state[data-state="RUNNING"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#cancel-run`, chromedp.ByQuery),
	)
	b.noPageErrors(t)
}
