package integration

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

// The triggers pages in a real browser against a real stack: two run
// triggers on the prep pipeline made through REST (retrain, whose params
// read the upstream run, and broken, pinned to version 1, whose
// reference cannot be rendered); two prep runs fire both. The list shows
// each trigger (what fires it, what it starts, its params as written,
// its rate, enabled, its last firing); retrain's page lists its two
// firings newest first, each with its upstream run and the run it
// started linked (one clicked through to its run page), as REST has them;
// broken's shows its failed firings with the error, is disabled through
// the page after a confirmation (REST agrees) and deleted after one (Keep
// first leaves it; REST then says 404). The create form shows what it
// cannot send at the field, then the gateway's 400 and 422 at each field
// they name, then creates a hook trigger, showing its URL and, once, its
// secret; a request signed with that secret fires it, and its page,
// open meanwhile, shows the delivery and the run it started. A viewer
// reads the triggers but is offered neither the form nor Disable nor
// Delete (REST still refuses its Disable). Any script error or CSP
// violation fails the test (but the deliberate 400 and 422).
//
// ATELIER_UI_SCREENSHOTS=<dir> writes docs/img/ui-triggers.png,
// ui-trigger.png and ui-trigger-create.png (see TestWebUIRunPageInBrowser).
func TestWebUITriggersInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a Temporal dev server and Chromium")
	}
	path := chromiumPath(t)
	s := newStack(t)
	ctx, c := context.Background(), s.client()
	s.createPipeline("prep", triggerPrepPipeline)
	s.createPipeline("train", triggerTrainPipeline)
	on := gen.TriggerOn{RunFinished: &gen.TriggerRunFinished{Pipeline: "prep"}}
	create := func(body gen.TriggerCreate) {
		t.Helper()
		res, err := c.CreateTriggerWithResponse(ctx, s.project, body)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode(), "%s", res.Body)
	}
	const description = "Retrain on each <b>new</b> export"
	create(gen.TriggerCreate{Name: "retrain", On: on, Pipeline: "train", Description: ptrTo(description),
		Params: &map[string]any{"dataset": "{{ upstream.steps.make.outputs.path }}", "lr": "{{ upstream.params.lr }}"}})
	create(gen.TriggerCreate{Name: "broken", On: on, Pipeline: "train", Version: ptrTo(1), MaxPerMinute: ptrTo(5),
		Params: &map[string]any{"dataset": "{{ upstream.outputs.missing }}", "lr": 1}})

	up1 := s.waitTerminal(s.start("prep", map[string]any{"lr": 0.25}), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, up1.State, "%s", val(up1.Status.Error))
	up2 := s.waitTerminal(s.start("prep", map[string]any{"lr": 0.5}), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, up2.State, "%s", val(up2.Status.Error))
	retrain := waitFirings(t, s, "retrain", 2, catalog.FiringStarted)
	broken := waitFirings(t, s, "broken", 2, catalog.FiringFailed)
	require.Equal(t, up2.Id, retrain[0].Source, "newest first")
	require.Equal(t, up1.Id, retrain[1].Source)

	br := newBrowser(t, path)
	shots := os.Getenv("ATELIER_UI_SCREENSHOTS")
	br.signIn(t, s.url, s.token)
	row := func(name string) string { return fmt.Sprintf(`#triggers tr[data-trigger=%q]`, name) }
	br.run(t, "open the triggers page from the nav",
		chromedp.Click(`#nav-triggers`, chromedp.ByQuery),
		chromedp.WaitVisible(row("retrain")+` .last-firing [data-firing="started"]`, chromedp.ByQuery),
		chromedp.WaitVisible(row("broken")+` .last-firing [data-firing="failed"]`, chromedp.ByQuery),
	)
	type listed struct {
		Name, Href, Description, DescriptionHTML, On, Upstream, UpstreamHref, Target, TargetHref, Max, Enabled, Last string
		Params                                                                                                       map[string]string
	}
	readList := func() (map[string]listed, string) {
		t.Helper()
		var out struct {
			Rows map[string]listed
			Nav  string
		}
		br.run(t, "read the list", chromedp.Evaluate(`(() => {
			const rows = {};
			for (const tr of document.querySelectorAll("#triggers > tbody > tr")) {
				const td = tr.querySelectorAll(":scope > td");
				const desc = td[0].querySelector(".desc");
				const up = td[1].querySelector("a.upstream");
				rows[tr.dataset.trigger] = {
					name: td[0].querySelector("a.trigger-name").textContent,
					href: td[0].querySelector("a.trigger-name").getAttribute("href"),
					description: desc ? desc.textContent : "",
					descriptionHTML: desc ? desc.innerHTML : "",
					on: td[1].textContent,
					upstream: up ? up.textContent : "",
					upstreamHref: up ? up.getAttribute("href") : "",
					target: td[2].textContent,
					targetHref: td[2].querySelector("a").getAttribute("href"),
					params: Object.fromEntries([...td[3].querySelectorAll("tr[data-param]")].map(p => [p.dataset.param, p.querySelector(".param-value").textContent])),
					max: td[4].textContent,
					enabled: td[5].textContent,
					last: td[6].textContent,
				};
			}
			return { rows, nav: document.querySelector("#nav-triggers").className };
		})()`, &out))
		return out.Rows, out.Nav
	}
	rows, nav := readList()
	assert.Equal(t, "active", nav)
	require.Len(t, rows, 2, "%+v", rows)
	p := "#/p/" + s.project
	r := rows["retrain"]
	assert.Equal(t, p+"/triggers/retrain", r.Href)
	assert.Equal(t, description, r.Description, "as text")
	assert.NotContains(t, r.DescriptionHTML, "<b>", "markup stays text")
	assert.Equal(t, "a run of prep ends SUCCEEDED", r.On)
	assert.Equal(t, "prep", r.Upstream)
	assert.Equal(t, p+"/pipelines/prep", r.UpstreamHref)
	assert.Equal(t, "train newest version", r.Target)
	assert.Equal(t, p+"/pipelines/train", r.TargetHref)
	assert.Equal(t, map[string]string{"dataset": `"{{ upstream.steps.make.outputs.path }}"`, "lr": `"{{ upstream.params.lr }}"`}, r.Params, "templates as written")
	assert.Equal(t, "60/min", r.Max)
	assert.Equal(t, "enabled", r.Enabled)
	assert.Equal(t, "started "+retrain[0].CreatedAt.Local().Format("2006-01-02 15:04:05"), r.Last)
	b := rows["broken"]
	assert.Equal(t, "train v1", b.Target)
	assert.Equal(t, p+"/pipelines/train/versions/1", b.TargetHref)
	assert.Equal(t, map[string]string{"dataset": `"{{ upstream.outputs.missing }}"`, "lr": "1"}, b.Params)
	assert.Equal(t, "5/min", b.Max)
	assert.Equal(t, "failed "+broken[0].CreatedAt.Local().Format("2006-01-02 15:04:05"), b.Last)

	// retrain's page: its two firings, newest first, as REST has them.
	br.run(t, "open retrain",
		chromedp.Click(row("retrain")+` a.trigger-name`, chromedp.ByQuery),
		chromedp.WaitVisible(`#firings tbody tr:nth-child(2)`, chromedp.ByQuery),
	)
	type firingRow struct {
		Source, SourceHref, State, Attempts, Run, RunHref, Error, Created, Finished string
	}
	readFirings := func() []firingRow {
		t.Helper()
		var out []firingRow
		br.run(t, "read the firings", chromedp.Evaluate(`[...document.querySelectorAll("#firings tbody tr")].map(tr => {
			const cell = (c) => tr.querySelector("td." + c);
			const src = cell("source").querySelector("a");
			const run = cell("run").querySelector("a");
			return {
				source: cell("source").textContent,
				sourceHref: src ? src.getAttribute("href") : "",
				state: cell("state").textContent,
				attempts: cell("attempts").textContent,
				run: cell("run").textContent,
				runHref: run ? run.getAttribute("href") : "",
				error: cell("err").textContent,
				created: cell("created").textContent,
				finished: cell("finished").textContent,
			};
		})`, &out))
		return out
	}
	local := func(at *time.Time) string {
		if at == nil {
			return ""
		}
		return at.Local().Format("2006-01-02 15:04:05")
	}
	fr := readFirings()
	require.Len(t, fr, 2)
	for i, f := range retrain {
		assert.Equal(t, firingRow{
			Source: f.Source, SourceHref: p + "/runs/" + f.Source, State: "started", Attempts: "1",
			Run: val(f.RunId), RunHref: p + "/runs/" + val(f.RunId), Error: "—",
			Created: local(&f.CreatedAt), Finished: local(f.FinishedAt),
		}, fr[i], "firing %d", i)
	}
	var head struct{ Name, On, Target, Max, Runs, Text string }
	br.run(t, "read retrain", chromedp.Evaluate(`({
		name: document.querySelector("#trigger-name").textContent,
		on: document.querySelector("#trigger-on").textContent,
		target: document.querySelector("#trigger-target").textContent,
		max: document.querySelector("#trigger-max").textContent,
		runs: document.querySelector("#trigger-runs").getAttribute("href"),
		text: document.body.innerText,
	})`, &head))
	assert.Equal(t, "retrain", head.Name)
	assert.Equal(t, "a run of prep ends SUCCEEDED", head.On)
	assert.Equal(t, "train newest version", head.Target)
	assert.Equal(t, "60 runs a minute (firings beyond it wait)", head.Max)
	assert.Equal(t, p+"/runs?createdBy=trigger%3Aretrain", head.Runs)
	assert.Contains(t, head.Text, description)
	if shots != "" {
		br.screenshot(t, filepath.Join(shots, "ui-trigger.png"))
	}
	// The run it started, one click away.
	started := val(retrain[0].RunId)
	var runID string
	br.run(t, "click through to the run it started",
		chromedp.Click(fmt.Sprintf(`#firings tr[data-source=%q] a.run-link`, up2.Id), chromedp.ByQuery),
		chromedp.WaitVisible(`#run-id`, chromedp.ByQuery),
		chromedp.Text(`#run-id`, &runID, chromedp.ByQuery),
	)
	assert.Equal(t, started, runID)
	down := s.waitTerminal(started, time.Minute)
	assert.Equal(t, "trigger:retrain", val(down.CreatedBy))
	assert.Equal(t, map[string]any{"dataset": "/data/v7", "lr": 0.5}, val(down.Status.Params))

	// broken's page: its failed firings, with the error; then Disable.
	br.run(t, "open broken",
		chromedp.Click(`#nav-triggers`, chromedp.ByQuery),
		chromedp.WaitVisible(row("broken")+` a.trigger-name`, chromedp.ByQuery),
		chromedp.Click(row("broken")+` a.trigger-name`, chromedp.ByQuery),
		chromedp.WaitVisible(`#firings tbody tr[data-state="FAILED"]:nth-child(2)`, chromedp.ByQuery),
	)
	fr = readFirings()
	require.Len(t, fr, 2)
	for i, f := range broken {
		assert.Equal(t, f.Source, fr[i].Source, "firing %d", i)
		assert.Equal(t, "failed", fr[i].State)
		assert.Equal(t, "—", fr[i].Run, "no run started")
		assert.Equal(t, val(f.Error), fr[i].Error)
		assert.Contains(t, fr[i].Error, `{{ upstream.outputs.missing }}: upstream.outputs is not an object`)
		assert.Equal(t, local(f.FinishedAt), fr[i].Finished)
	}
	var confirm string
	br.run(t, "ask to disable, keep it enabled",
		chromedp.Click(`#toggle-enabled`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm-trigger`, chromedp.ByQuery),
		chromedp.Text(`#confirm-trigger .confirm-text`, &confirm, chromedp.ByQuery),
		chromedp.Click(`#confirm-trigger-no`, chromedp.ByQuery),
		chromedp.WaitNotVisible(`#confirm-trigger`, chromedp.ByQuery),
	)
	assert.Contains(t, confirm, "Disable broken? Runs of prep that finish while it is disabled queue no firing")
	getTrigger := func(name string) (int, *gen.Trigger) {
		t.Helper()
		res, err := c.GetTriggerWithResponse(ctx, s.project, name)
		require.NoError(t, err)
		return res.StatusCode(), res.JSON200
	}
	code, got := getTrigger("broken")
	require.Equal(t, http.StatusOK, code)
	assert.True(t, got.Enabled, "Keep changes nothing")
	br.run(t, "disable it",
		chromedp.Click(`#toggle-enabled`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm-trigger-yes`, chromedp.ByQuery),
		chromedp.Click(`#confirm-trigger-yes`, chromedp.ByQuery),
		chromedp.WaitVisible(`#trigger [data-enabled="false"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#trigger-disabled`, chromedp.ByQuery),
		br.waitText(`#toggle-enabled`, "Enable"),
	)
	code, got = getTrigger("broken")
	require.Equal(t, http.StatusOK, code)
	assert.False(t, got.Enabled, "stored disabled")

	// The create form: what it cannot send, then the gateway's 422 at
	// each field, then a hook trigger.
	br.run(t, "open the form",
		chromedp.Click(`#nav-triggers`, chromedp.ByQuery),
		chromedp.WaitVisible(row("broken")+` [data-enabled="false"]`, chromedp.ByQuery),
		chromedp.Click(`#new-trigger`, chromedp.ByQuery),
		chromedp.WaitVisible(`#create-trigger`, chromedp.ByQuery),
		setInput(`#trigger-name`, "Bad_Name"),
		setInput(`#trigger-upstream`, "train"),
		setInput(`#trigger-pipeline`, "train"),
		setInput(`#trigger-params`, `{"nope": `),
		setInput(`#trigger-max-per-minute`, "5000"),
		chromedp.Click(`#create-trigger-submit`, chromedp.ByQuery),
		chromedp.WaitVisible(`#create-trigger [data-field="params"] .field-error`, chromedp.ByQuery),
	)
	fieldErrors := func() map[string]string {
		t.Helper()
		var out map[string]string
		br.run(t, "read the field errors", chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll("#create-trigger .field")].filter(f => !f.querySelector(".field-error").hidden).map(f => [f.dataset.field, f.querySelector(".field-error").textContent]))`, &out))
		return out
	}
	errs := fieldErrors()
	assert.Len(t, errs, 1, "only what the page cannot send: %v", errs)
	assert.Contains(t, errs["params"], "not a JSON object")
	// The request's schema first (a 400: maxPerMinute is at most 1000),
	// then the trigger's sense (a 422).
	var summary string
	br.run(t, "send it to the gateway",
		setInput(`#trigger-params`, `{"nope": "{{ upstream.params.lr }}", "lr": "fast"}`),
		chromedp.WaitNotPresent(`#create-trigger [data-field="params"].invalid`, chromedp.ByQuery),
		chromedp.Click(`#create-trigger-submit`, chromedp.ByQuery),
		chromedp.WaitVisible(`#create-trigger [data-field="maxPerMinute"] .field-error`, chromedp.ByQuery),
		chromedp.Text(`#create-trigger .form-error`, &summary, chromedp.ByQuery),
	)
	errs = fieldErrors()
	assert.Len(t, errs, 1, "%v", errs)
	assert.Contains(t, errs["maxPerMinute"], "1000")
	assert.Equal(t, "The gateway refused the trigger (HTTP 400): see the fields marked above.", summary)
	br.run(t, "send it again",
		setInput(`#trigger-max-per-minute`, "500"),
		chromedp.WaitNotPresent(`#create-trigger [data-field="maxPerMinute"].invalid`, chromedp.ByQuery),
		chromedp.Click(`#create-trigger-submit`, chromedp.ByQuery),
		chromedp.WaitVisible(`#create-trigger [data-field="name"] .field-error`, chromedp.ByQuery),
		chromedp.Text(`#create-trigger .form-error`, &summary, chromedp.ByQuery),
	)
	errs = fieldErrors()
	assert.Len(t, errs, 3, "%v", errs)
	assert.Contains(t, errs["name"], "must be a DNS label")
	assert.Contains(t, errs["upstream"], "cannot start the pipeline whose runs fire it")
	assert.Contains(t, errs["params"], `params.nope: pipeline "train" version 1 has no param "nope"`)
	assert.Contains(t, errs["params"], "params.lr: ")
	assert.Equal(t, "The gateway refused the trigger (HTTP 422): see the fields marked above.", summary)
	if shots != "" {
		formShot(t, br, filepath.Join(shots, "ui-trigger-create.png"))
	}
	list, err := c.ListTriggersWithResponse(ctx, s.project)
	require.NoError(t, err)
	assert.Len(t, list.JSON200.Items, 2, "nothing created")

	var created struct{ Link, Href, URL, Secret, List string }
	br.run(t, "create a hook trigger",
		setInput(`#trigger-name`, "on-upload"),
		chromedp.Click(`#trigger-kind-hook`, chromedp.ByQuery),
		chromedp.WaitNotVisible(`#trigger-upstream`, chromedp.ByQuery),
		setInput(`#trigger-params`, `{"dataset": "s3://bucket/{{ body.ref }}", "lr": "{{ body.lr }}"}`),
		setInput(`#trigger-max-per-minute`, "30"),
		chromedp.Click(`#create-trigger-submit`, chromedp.ByQuery),
		chromedp.WaitVisible(`#trigger-created`, chromedp.ByQuery),
		chromedp.WaitVisible(row("on-upload"), chromedp.ByQuery),
		chromedp.Evaluate(`({
			link: document.querySelector("#created-link").textContent,
			href: document.querySelector("#created-link").getAttribute("href"),
			url: document.querySelector("#trigger-created .hook-url").textContent,
			secret: document.querySelector("#created-secret").textContent,
			list: document.querySelector("#triggers").innerText,
		})`, &created),
	)
	assert.True(t, created.Secret != "" && strings.HasPrefix(created.Secret, "hksec_"), "%q", created.Secret)
	assert.NotContains(t, created.List, created.Secret, "the list never shows a secret")
	hookURL := s.url + "/v1/hooks/" + s.project + "/on-upload"
	assert.Equal(t, "on-upload", created.Link)
	assert.Equal(t, p+"/triggers/on-upload", created.Href)
	assert.Equal(t, hookURL, created.URL)
	code, got = getTrigger("on-upload")
	require.Equal(t, http.StatusOK, code)
	assert.NotNil(t, got.On.Hook)
	assert.Equal(t, 30, got.MaxPerMinute)
	assert.Equal(t, map[string]any{"dataset": "s3://bucket/{{ body.ref }}", "lr": "{{ body.lr }}"}, got.Params)
	assert.Equal(t, "ci-editor", val(got.CreatedBy), "created by the signed-in token")
	rows, _ = readList()
	require.Len(t, rows, 3)
	assert.Equal(t, "a signed POST to "+hookURL+"Copy", rows["on-upload"].On, "the URL, with its Copy button")
	assert.Equal(t, "never fired", rows["on-upload"].Last)

	// Its page is open when a request signed with the secret the form
	// showed fires it: the refreshing page shows the delivery.
	var text string
	br.run(t, "open on-upload",
		chromedp.Click(`#created-link`, chromedp.ByQuery),
		chromedp.WaitVisible(`#no-firings`, chromedp.ByQuery),
		chromedp.Evaluate(`document.body.innerText`, &text),
	)
	assert.Contains(t, text, hookURL)
	assert.NotContains(t, text, created.Secret, "shown once, on creation")
	require.Equal(t, http.StatusAccepted, postSignedHook(t, hookURL, created.Secret, "upload-42", `{"ref": "uploads/42.csv", "lr": 0.125}`))
	br.run(t, "the delivery shows",
		chromedp.WaitVisible(`#firings tr[data-source="upload-42"][data-state="SUCCEEDED"] a.run-link`, chromedp.ByQuery),
	)
	fr = readFirings()
	require.Len(t, fr, 1)
	hooked := waitFirings(t, s, "on-upload", 1, catalog.FiringStarted)[0]
	assert.Equal(t, firingRow{
		Source: "upload-42", State: "started", Attempts: "1", Run: val(hooked.RunId), RunHref: p + "/runs/" + val(hooked.RunId),
		Error: "—", Created: local(&hooked.CreatedAt), Finished: local(hooked.FinishedAt),
	}, fr[0], "a delivery is not a link")
	hookRun := s.waitTerminal(val(hooked.RunId), time.Minute)
	assert.Equal(t, map[string]any{"dataset": "s3://bucket/uploads/42.csv", "lr": 0.125}, val(hookRun.Status.Params))

	if shots != "" {
		br.run(t, "the list, every trigger fired",
			chromedp.Click(`#nav-triggers`, chromedp.ByQuery),
			chromedp.WaitVisible(row("on-upload")+` .last-firing [data-firing="started"]`, chromedp.ByQuery),
		)
		br.screenshot(t, filepath.Join(shots, "ui-triggers.png"))
	}

	// Delete broken: Keep first leaves it, then Delete goes back to the list.
	br.run(t, "ask to delete broken, keep it",
		chromedp.Navigate(s.url+"/ui/"+p+"/triggers/broken"),
		chromedp.WaitVisible(`#firings`, chromedp.ByQuery),
		chromedp.Click(`#delete-trigger`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm-trigger`, chromedp.ByQuery),
		chromedp.Text(`#confirm-trigger .confirm-text`, &confirm, chromedp.ByQuery),
		chromedp.Click(`#confirm-trigger-no`, chromedp.ByQuery),
		chromedp.WaitNotVisible(`#confirm-trigger`, chromedp.ByQuery),
	)
	assert.Equal(t, "Delete the trigger broken? Its firing log goes with it; the runs it started stay. This cannot be undone.", confirm)
	code, _ = getTrigger("broken")
	require.Equal(t, http.StatusOK, code, "Keep deletes nothing")
	var flash, hash string
	br.run(t, "delete it",
		chromedp.Click(`#delete-trigger`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm-trigger-yes`, chromedp.ByQuery),
		chromedp.Click(`#confirm-trigger-yes`, chromedp.ByQuery),
		chromedp.WaitVisible(`#triggers-flash .alert`, chromedp.ByQuery),
		chromedp.WaitVisible(row("retrain"), chromedp.ByQuery),
		chromedp.Text(`#triggers-flash .alert`, &flash, chromedp.ByQuery),
		chromedp.Evaluate(`location.hash`, &hash),
	)
	assert.Equal(t, p+"/triggers", hash)
	assert.Equal(t, "Deleted the trigger broken, with its firing log; the runs it started stay.", flash)
	rows, _ = readList()
	assert.NotContains(t, rows, "broken")
	assert.Len(t, rows, 2)
	code, _ = getTrigger("broken")
	assert.Equal(t, http.StatusNotFound, code, "deleted")

	// The refused creations are the only errors this browser logged.
	br.noPageErrorsBut(t, func(e string) bool {
		return strings.HasSuffix(e, "/v1/projects/"+s.project+"/triggers)") && (strings.Contains(e, "status of 400") || strings.Contains(e, "status of 422"))
	})

	// A viewer reads triggers but is not offered changes (in a browser of
	// its own, which logs no error); the gateway still refuses them.
	viewer := s.newToken("viewer", tokens.RoleViewer)
	vb := newBrowser(t, path)
	vb.signIn(t, s.url, viewer)
	var note string
	var offered []string
	vb.run(t, "a viewer's trigger page",
		chromedp.Navigate(s.url+"/ui/"+p+"/triggers/retrain"),
		chromedp.WaitVisible(fmt.Sprintf(`#firings tr[data-source=%q]`, up1.Id), chromedp.ByQuery),
		chromedp.Text(`#trigger-role-note`, &note, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll("#toggle-enabled, #delete-trigger")].map(b => b.id)`, &offered),
	)
	assert.Empty(t, offered, "no Disable, no Delete")
	assert.Equal(t, "Enabling, disabling and deleting triggers needs an editor token of this project (or an admin's); this token (viewer) is a viewer.", note)
	vb.run(t, "a viewer's triggers list",
		chromedp.Navigate(s.url+"/ui/"+p+"/triggers"),
		chromedp.WaitVisible(row("retrain"), chromedp.ByQuery),
		chromedp.WaitVisible(`#triggers-role-note`, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll("#new-trigger, form.trigger-form")].map(b => b.id || b.className)`, &offered),
	)
	assert.Empty(t, offered, "no New trigger, no form")
	vb.noPageErrors(t)
	res, err := s.clientAs(viewer).UpdateTriggerWithResponse(ctx, s.project, "retrain", gen.TriggerUpdate{Enabled: false})
	require.NoError(t, err)
	assert.Equal(t, http.StatusForbidden, res.StatusCode(), "%s", res.Body)
	assert.Contains(t, string(res.Body), "needs the editor role; the token has viewer")
	code, got = getTrigger("retrain")
	require.Equal(t, http.StatusOK, code)
	assert.True(t, got.Enabled, "a viewer's Disable is refused")
}

// waitFirings waits until trigger has n firings, all in state; newest first.
func waitFirings(t *testing.T, s *stack, trigger string, n int, state string) []gen.TriggerFiring {
	t.Helper()
	var last []gen.TriggerFiring
	require.Eventually(t, func() bool {
		res, err := s.client().ListTriggerFiringsWithResponse(context.Background(), s.project, trigger, nil)
		if err != nil || res.JSON200 == nil {
			return false
		}
		last = res.JSON200.Items
		if len(last) != n {
			return false
		}
		for _, f := range last {
			if string(f.State) != state {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "trigger %s: not %d firings %s (last %+v)", trigger, n, state, last)
	return last
}

// postSignedHook POSTs body to a hook URL signed with secret as Atelier
// signs (X-Atelier-Signature over "<timestamp>.<body>") and returns the
// status code.
func postSignedHook(t *testing.T, url, secret, delivery, body string) int {
	t.Helper()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "." + body))
	req, err := http.NewRequest("POST", url, bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Atelier-Timestamp", ts)
	req.Header.Set("X-Atelier-Signature", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	req.Header.Set("X-Atelier-Delivery", delivery)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	return resp.StatusCode
}
