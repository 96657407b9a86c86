package integration

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

// The webhooks pages in a real browser against a real stack: a webhook
// subscribed to run.finished, whose receiver (a test HTTP server) answers
// 500 to an event's first delivery and 200 to the next; a run ends, and
// the list shows the webhook (URL, events, enabled, its last delivery
// succeeded) and never its secret; its page shows the delivery with both
// attempts (status codes, the receiver's error, durations) linked to the
// run, as REST has them; Disable through the page is stored. A viewer's
// token is told that webhooks need an editor, without a request the
// gateway refuses (REST still refuses it). Any script error or CSP
// violation fails the test.
//
// ATELIER_UI_SCREENSHOTS=<dir> writes docs/img/ui-webhooks.png (see
// TestWebUIRunPageInBrowser).
func TestWebUIWebhooksInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a Temporal dev server and Chromium")
	}
	path := chromiumPath(t)
	s := newStack(t)
	ctx := context.Background()
	rc := &receiver{seen: map[string]int{}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	c := s.client()
	created, err := c.CreateWebhookWithResponse(ctx, s.project, gen.WebhookCreate{
		Url:         srv.URL + "/hooks/atelier",
		Events:      []gen.WebhookEvent{"run.finished"},
		Pipeline:    ptrTo("hello-hook"),
		Description: ptrTo("CI receiver"),
	})
	require.NoError(t, err)
	require.Equal(t, 201, created.StatusCode(), "%s", created.Body)
	hook := created.JSON201.Webhook
	secret := val(created.JSON201.Secret)
	require.NotEmpty(t, secret)

	s.createPipeline("hello-hook", `
steps:
  - name: hello
    container: {command: [sh, -c, 'echo hello']}
`)
	run := s.waitTerminal(s.start("hello-hook", nil), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, run.State)

	br := newBrowser(t, path)
	shots := os.Getenv("ATELIER_UI_SCREENSHOTS")
	br.signIn(t, s.url, s.token)
	row := fmt.Sprintf(`#webhooks tr[data-webhook=%q]`, hook.Id)
	// The list refreshes until the retried delivery has succeeded.
	br.run(t, "open the webhooks page from the nav",
		chromedp.Click(`#nav-webhooks`, chromedp.ByQuery),
		chromedp.WaitVisible(row, chromedp.ByQuery),
		chromedp.WaitVisible(row+` [data-delivery="succeeded"]`, chromedp.ByQuery),
	)
	var list struct {
		URL, Href, Description, Pipeline, Enabled, Last string
		Events                                          []string
		Page                                            string
	}
	br.run(t, "read the list", chromedp.Evaluate(`(() => {
		const tr = document.querySelector(`+"`"+row+"`"+`);
		const td = tr.querySelectorAll("td");
		return {
			url: td[0].querySelector("a").textContent,
			href: td[0].querySelector("a").getAttribute("href"),
			description: td[0].querySelector(".muted").textContent,
			events: [...td[1].querySelectorAll("[data-event]")].map(e => e.dataset.event),
			pipeline: td[2].textContent,
			enabled: td[3].textContent,
			last: td[4].textContent,
			page: document.body.innerText,
		};
	})()`, &list))
	assert.Equal(t, srv.URL+"/hooks/atelier", list.URL)
	assert.Equal(t, "#/p/"+s.project+"/webhooks/"+hook.Id, list.Href)
	assert.Equal(t, "CI receiver", list.Description)
	assert.Equal(t, []string{"run.finished"}, list.Events)
	assert.Equal(t, "hello-hook", list.Pipeline)
	assert.Equal(t, "enabled", list.Enabled)
	assert.True(t, strings.HasPrefix(list.Last, "succeeded run.finished · "), "%q", list.Last)
	assert.NotContains(t, list.Page, secret, "the secret is never shown")

	// The webhook's page: the delivery and both of its attempts.
	br.run(t, "open the webhook",
		chromedp.Click(row+` a.webhook-url`, chromedp.ByQuery),
		chromedp.WaitVisible(`#deliveries tbody.delivery[data-state="SUCCEEDED"] table.attempts tr[data-attempt="2"]`, chromedp.ByQuery),
	)
	type attempt struct {
		N, Status, Error, Duration, Started string
	}
	var page struct {
		Hash, URL, Event, Run, RunHref, State, Count, Last string
		Deliveries                                         int
		Attempts                                           []attempt
		Text                                               string
	}
	br.run(t, "read the deliveries", chromedp.Evaluate(`(() => {
		const d = document.querySelector("#deliveries tbody.delivery");
		const td = d.querySelectorAll("tr.delivery-row > td");
		return {
			hash: location.hash,
			url: document.querySelector("#webhook-url").textContent,
			event: d.dataset.event,
			run: td[2].querySelector("a").textContent,
			runHref: td[2].querySelector("a").getAttribute("href"),
			state: td[3].textContent,
			count: td[4].textContent,
			last: td[5].textContent,
			deliveries: document.querySelectorAll("#deliveries tbody.delivery").length,
			attempts: [...d.querySelectorAll("table.attempts tbody tr")].map(tr => {
				const c = tr.querySelectorAll("td");
				return { n: c[0].textContent, started: c[1].textContent, duration: c[2].textContent, status: c[3].textContent, error: c[4].textContent };
			}),
			text: document.body.innerText,
		};
	})()`, &page))
	assert.Equal(t, "#/p/"+s.project+"/webhooks/"+hook.Id, page.Hash)
	assert.Equal(t, srv.URL+"/hooks/atelier", page.URL)
	assert.Equal(t, 1, page.Deliveries, "one run, one run.finished event")
	assert.Equal(t, "run.finished", page.Event)
	assert.Equal(t, run.Id, page.Run)
	assert.Equal(t, "#/p/"+s.project+"/runs/"+run.Id, page.RunHref)
	assert.Equal(t, "succeeded", page.State)
	assert.Equal(t, "2", page.Count)
	assert.Equal(t, "200", page.Last)
	require.Len(t, page.Attempts, 2, "%+v", page.Attempts)
	assert.Equal(t, "#1", page.Attempts[0].N)
	assert.Equal(t, "500", page.Attempts[0].Status)
	assert.Contains(t, page.Attempts[0].Error, "receiver is warming up")
	assert.Equal(t, "#2", page.Attempts[1].N)
	assert.Equal(t, "200", page.Attempts[1].Status)
	assert.Equal(t, "—", page.Attempts[1].Error)
	assert.NotContains(t, page.Text, secret)

	// As REST has them.
	d, err := c.ListWebhookDeliveriesWithResponse(ctx, s.project, hook.Id, nil)
	require.NoError(t, err)
	require.Equal(t, 200, d.StatusCode(), "%s", d.Body)
	require.Len(t, d.JSON200.Items, 1)
	log := d.JSON200.Items[0].Log
	require.Len(t, log, 2)
	for i, a := range log {
		assert.Equal(t, fmtMsLikeUI(a.DurationMs), page.Attempts[i].Duration, "attempt %d", i+1)
		assert.Equal(t, a.StartedAt.Local().Format("2006-01-02 15:04:05"), page.Attempts[i].Started, "attempt %d (the browser and the test share a time zone)", i+1)
	}
	if shots != "" {
		br.screenshot(t, filepath.Join(shots, "ui-webhooks.png"))
	}

	// Disable it from the page.
	br.run(t, "disable it",
		chromedp.Click(`#toggle-enabled`, chromedp.ByQuery),
		chromedp.WaitVisible(`#webhook [data-enabled="false"]`, chromedp.ByQuery),
		br.waitText(`#toggle-enabled`, "Enable"),
	)
	got, err := c.GetWebhookWithResponse(ctx, s.project, hook.Id)
	require.NoError(t, err)
	require.Equal(t, 200, got.StatusCode())
	assert.False(t, got.JSON200.Enabled, "stored disabled")
	br.noPageErrors(t)

	// A viewer cannot read webhooks: the page says so without asking the
	// gateway (in a browser of its own, which logs no error), and the
	// gateway still refuses the viewer's token.
	viewer := s.newToken("viewer", tokens.RoleViewer)
	vb := newBrowser(t, path)
	vb.signIn(t, s.url, viewer)
	var note string
	vb.run(t, "a viewer's webhooks page",
		chromedp.Click(`#nav-webhooks`, chromedp.ByQuery),
		chromedp.WaitVisible(`#webhooks-role-note`, chromedp.ByQuery),
		chromedp.Text(`#webhooks-role-note`, &note, chromedp.ByQuery),
	)
	assert.Contains(t, note, "Reading webhooks needs an editor token of this project (or an admin's); this token (viewer) is a viewer.")
	assert.Contains(t, note, "Webhooks are shown to editors only")
	vb.run(t, "a viewer's webhook page",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/webhooks/"+hook.Id),
		chromedp.WaitVisible(`#webhook #webhooks-role-note`, chromedp.ByQuery),
	)
	vb.noPageErrors(t)
	refused, err := s.clientAs(viewer).ListWebhooksWithResponse(ctx, s.project)
	require.NoError(t, err)
	assert.Equal(t, 403, refused.StatusCode(), "%s", refused.Body)
	assert.Contains(t, string(refused.Body), "needs the editor role; the token has viewer")
}

// fmtMsLikeUI is how the webhook page renders an attempt's duration.
func fmtMsLikeUI(ms int) string {
	switch {
	case ms < 1000:
		return fmt.Sprintf("%d ms", ms)
	case ms < 10_000:
		return fmt.Sprintf("%.2f s", float64(ms)/1000)
	}
	return fmt.Sprintf("%.1f s", float64(ms)/1000)
}
