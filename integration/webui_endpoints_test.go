package integration

import (
	"context"
	"fmt"
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
	"github.com/atelier-ml/atelier/examples/modelserver"
)

// The endpoint pages in a real browser against a real stack, with an
// endpoint on the local runtime (examples/modelserver standing in for
// vLLM, as in TestEndpointOnTheLocalRuntime):
//   - the list shows it serving revision 1 with all the traffic, and its
//     page the revision's weight and ready replica;
//   - a new spec (through REST) starts a canary of revision 2 that pauses
//     at 50%: the page shows the rollout, its stage and its gates, first
//     waiting for samples, then, after requests pinned to revision 2 go
//     through the gateway, the window's figures REST reports (requests,
//     errors, p99) and the gates within their limits;
//   - Promote (confirmed) makes revision 2 the serving one, and REST
//     agrees; a canary of revision 3 is aborted (confirmed): revision 2
//     keeps all the traffic; Roll back to revision 1 makes revision 4
//     from its spec; a second rollback while 4 rolls out shows the
//     gateway's 409 in the form and changes nothing.
//
// Any script error or CSP violation fails the test (but the refused
// rollback's own 409).
//
// ATELIER_UI_SCREENSHOTS=<dir> writes docs/img/ui-endpoint.png (see
// TestWebUIRunPageInBrowser).
func TestWebUIEndpointsInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a Temporal dev server and Chromium")
	}
	path := chromiumPath(t)
	engine := modelserverBinary(t)
	s := newStack(t, stackOptions{localEngines: map[string]string{"vllm": engine}})
	ctx := context.Background()
	// A canary that pauses for an hour at 50%: it moves on only when
	// promoted (or aborted). No synthetic probes: the window counts the
	// test's requests only.
	spec := func(version string) map[string]any {
		return map[string]any{"backend": "vllm", "model": map[string]any{"name": "tiny"}, "image": "vllm/vllm-openai:v0.9.1",
			"env": []map[string]string{
				{"name": modelserver.EnvModelVersion, "value": version},
				{"name": modelserver.EnvStartupDelay, "value": "500ms"},
			},
			"replicas": map[string]any{"min": 1, "max": 1},
			"rollout": map[string]any{"strategy": "canary",
				"canary": map[string]any{"steps": []map[string]any{{"weight": 50, "pause": "1h"}}},
				"gates":  map[string]any{"maxErrorRate": 0.05, "maxP99LatencyMs": 2000, "minSamples": 8, "analysisInterval": "1s"}}}
	}
	s.createEndpoint(t, "", spec("v1"))
	s.cleanupEndpoint(t)
	s.waitEndpoint(t, 90*time.Second, "served revision 1", servedBy(1))

	br := newBrowser(t, path)
	shots := os.Getenv("ATELIER_UI_SCREENSHOTS")
	var row struct{ State, Serving, Traffic, Ready string }
	br.run(t, "log in and open the endpoints",
		chromedp.Navigate(s.url+"/ui/"),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, s.token, chromedp.ByQuery),
		chromedp.Click(`#login`, chromedp.ByQuery),
		chromedp.WaitVisible(`#nav-endpoints`, chromedp.ByQuery),
		chromedp.Click(`#nav-endpoints`, chromedp.ByQuery),
		chromedp.WaitVisible(`#endpoints tr[data-endpoint="chat"] .badge[data-state="SERVING"]`, chromedp.ByQuery),
		chromedp.Evaluate(`(() => {
			const td = [...document.querySelectorAll('#endpoints tr[data-endpoint="chat"] td')].map(x => x.textContent);
			return {state: td[1], serving: td[2], traffic: td[4], ready: td[5]};
		})()`, &row),
	)
	assert.Equal(t, struct{ State, Serving, Traffic, Ready string }{"SERVING", "r1", "r1 100%", "1/1"}, row)

	// The endpoint's page: revision 1 serves all the traffic.
	type revRow struct {
		Rev, Roles, Weight, Wanted, Ready string
	}
	revisions := func() []revRow {
		t.Helper()
		var out []revRow
		br.run(t, "read the revisions", chromedp.Evaluate(`[...document.querySelectorAll("#revisions tbody tr")].map(r => ({
			rev: r.dataset.revision, roles: r.children[1].textContent, weight: r.dataset.weight,
			wanted: r.querySelector(".replicas-wanted").textContent, ready: r.querySelector(".replicas-ready").textContent,
		}))`, &out))
		return out
	}
	br.run(t, "open the endpoint",
		chromedp.Click(`#endpoints tr[data-endpoint="chat"] a`, chromedp.ByQuery),
		chromedp.WaitVisible(`#endpoint-state[data-state="SERVING"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#revisions tr[data-revision="1"][data-weight="100"]`, chromedp.ByQuery),
	)
	assert.Equal(t, []revRow{{"1", "serving", "100", "1", "1/1 ready"}}, revisions())
	var hidden []bool
	br.run(t, "no rollout, no rollout buttons", chromedp.Evaluate(`["#rollout", "#promote", "#abort", "#rollback"].map(s => document.querySelector(s).hidden)`, &hidden))
	assert.Equal(t, []bool{true, true, true, true}, hidden, "one revision: nothing to promote, abort or roll back to")

	// A canary of revision 2, paused at 50%: its gates wait for samples.
	s.updateEndpoint(t, spec("v2"))
	s.waitEndpoint(t, time.Minute, "paused the canary of revision 2", func(v gen.Endpoint) bool {
		return v.Rollout != nil && v.Rollout.Revision == 2 && v.Rollout.Stage == "CanaryPause"
	})
	var stage, strategy string
	br.run(t, "the rollout shows",
		chromedp.WaitVisible(`section.endpoint[data-rollout="2"] #rollout`, chromedp.ByQuery),
		br.waitText(`#rollout-stage`, "CanaryPause"),
		chromedp.WaitVisible(`#gates tr[data-gate="Samples"][data-verdict="insufficient"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#revisions tr[data-revision="2"][data-weight="50"]`, chromedp.ByQuery),
		chromedp.Text(`#rollout-stage`, &stage, chromedp.ByQuery),
		chromedp.Text(`#rollout-strategy`, &strategy, chromedp.ByQuery),
	)
	assert.Equal(t, "CanaryPause", stage)
	assert.Equal(t, "canary", strategy)
	// The reason of the rollout's last step, as REST gives it.
	v := s.getEndpoint(t).JSON200
	require.NotNil(t, v.Rollout)
	assert.Contains(t, val(v.Rollout.Reason), "canary step 1 of 1")
	br.run(t, "the rollout's reason", br.waitText(`#rollout-reason`, "canary step 1 of 1"))
	revs := revisions()
	require.Len(t, revs, 2)
	assert.Equal(t, revRow{"2", "candidate", "50", "1", "1/1 ready"}, revs[0])
	assert.Equal(t, revRow{"1", "serving", "50", "1", "1/1 ready"}, revs[1])

	// Requests pinned to revision 2 through the gateway: the window's
	// figures, as REST reports them, beside the gates.
	const pinned = 10
	for range pinned {
		code, rev, body := s.completePinned(ctx, "2")
		require.Equal(t, 200, code, body)
		require.Equal(t, "2", rev)
	}
	v = ptrTo(s.waitEndpoint(t, 30*time.Second, "counted the pinned requests", func(v gen.Endpoint) bool {
		return v.Window != nil && v.Window.Revision == 2 && v.Window.Requests >= pinned && v.Window.P99LatencyMs != nil
	}))
	w := *v.Window
	br.run(t, "the gates with the window's figures",
		br.waitText(`#gates tr[data-gate="ErrorRate"] .gate-live`, fmt.Sprintf("%d errors in %d requests", w.Errors, w.Requests)),
		chromedp.WaitVisible(`#gates tr[data-gate="Samples"][data-verdict="pass"]`, chromedp.ByQuery),
	)
	var gates map[string][]string
	br.run(t, "read the gates", chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll("#gates tbody tr")].map(r => [r.dataset.gate, [r.children[1].firstChild.textContent, r.querySelector(".gate-live").textContent, r.dataset.verdict]]))`, &gates))
	assert.Equal(t, map[string][]string{
		"ErrorRate": {"errors ≤ 5.0% of requests", fmt.Sprintf("0 errors in %d requests (0%%)", w.Requests), "pass"},
		"Latency":   {"p99 ≤ 2000 ms", "p99 ≤ " + msText(*w.P99LatencyMs), "pass"},
		"Samples":   {"≥ 8 requests before a traffic verdict", fmt.Sprintf("%d of 8 since %s", w.Requests, w.From.Local().Format("2006-01-02 15:04:05")), "pass"},
		"Readiness": {"replicas ready within their startup deadlines", "1 of 1 ready", "pass"},
		"CrashLoop": {"no replica crash-looping", "0 crash-looping", "pass"},
	}, gates)
	assert.Zero(t, w.Errors)
	if shots != "" {
		br.screenshot(t, filepath.Join(shots, "ui-endpoint.png"))
	}

	// Promote, confirmed: revision 2 serves.
	var promoteText string
	br.run(t, "promote",
		chromedp.Click(`#promote`, chromedp.ByQuery),
		chromedp.WaitVisible(`#promote-form`, chromedp.ByQuery),
		chromedp.Text(`#promote-form .form-text`, &promoteText, chromedp.ByQuery),
		chromedp.Click(`#confirm-promote`, chromedp.ByQuery),
		chromedp.WaitNotVisible(`#promote-form`, chromedp.ByQuery),
		chromedp.WaitVisible(`section.endpoint[data-rollout=""][data-stable="2"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#endpoint-state[data-state="SERVING"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#revisions tr[data-revision="2"][data-weight="100"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#events tr[data-kind="RolloutPromote"]`, chromedp.ByQuery),
	)
	assert.Contains(t, promoteText, "Promote revision 2?")
	v = ptrTo(s.waitEndpoint(t, 30*time.Second, "served by revision 2", servedBy(2)))
	assert.True(t, hasEvent(*v, "RolloutPromote", 2), "events:%s", eventLine(*v))
	assert.True(t, hasEvent(*v, "Command", 2), "the promote was a command: events:%s", eventLine(*v))
	assert.Equal(t, []gen.RevisionWeight{{Revision: 2, Weight: 100}}, v.Traffic)
	revs = revisions()
	require.Len(t, revs, 2)
	assert.Equal(t, revRow{"2", "serving", "100", "1", "1/1 ready"}, revs[0])
	assert.Equal(t, []string{"1", "", "0"}, []string{revs[1].Rev, revs[1].Roles, revs[1].Weight}, "revision 1 no longer serves")

	// A canary of revision 3, aborted from the page: revision 2 keeps the traffic.
	s.updateEndpoint(t, spec("v3"))
	var abortText string
	br.run(t, "abort the rollout of revision 3",
		chromedp.WaitVisible(`section.endpoint[data-rollout="3"] #abort`, chromedp.ByQuery),
		chromedp.Click(`#abort`, chromedp.ByQuery),
		chromedp.WaitVisible(`#abort-form`, chromedp.ByQuery),
		chromedp.Text(`#abort-form .form-text`, &abortText, chromedp.ByQuery),
		chromedp.Click(`#confirm-abort`, chromedp.ByQuery),
		chromedp.WaitVisible(`section.endpoint[data-rollout=""][data-stable="2"][data-current="3"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#events tr[data-kind="RolloutRollBack"]`, chromedp.ByQuery),
	)
	assert.Contains(t, abortText, "All traffic goes back to revision 2")
	v = ptrTo(s.waitEndpoint(t, 30*time.Second, "rolled revision 3 back", func(v gen.Endpoint) bool {
		return v.Rollout == nil && v.Stable == 2 && hasEvent(v, "RolloutRollBack", 3)
	}))
	assert.Equal(t, []gen.RevisionWeight{{Revision: 2, Weight: 100}}, v.Traffic)
	assert.Equal(t, 3, v.Current)

	// Roll back to revision 1: revision 4, with revision 1's spec, rolls out.
	var options []string
	br.run(t, "roll back to revision 1",
		chromedp.Click(`#rollback`, chromedp.ByQuery),
		chromedp.WaitVisible(`#rollback-form`, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll("#rollback-to option")].map(o => o.textContent)`, &options),
		chromedp.SetValue(`#rollback-to`, "1", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#rollback-to").dispatchEvent(new Event("change"))`, nil),
		br.waitText(`#rollback-form .form-text`, "makes revision 4 with revision 1's spec"),
		chromedp.Click(`#confirm-rollback`, chromedp.ByQuery),
		chromedp.WaitVisible(`section.endpoint[data-current="4"][data-rollout="4"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#revisions tr[data-revision="4"]`, chromedp.ByQuery),
	)
	assert.Equal(t, []string{"revision 2 (serving)", "revision 1"}, options, "every revision but the latest, newest first")
	v = s.getEndpoint(t).JSON200
	require.NotNil(t, v)
	require.Len(t, v.Revisions, 4)
	assert.Equal(t, 1, val(v.Revisions[3].RollbackOf))
	require.NotNil(t, v.Rollout)
	assert.Equal(t, 4, v.Rollout.Revision)
	var roles []string
	br.run(t, "revision 4's roles", chromedp.Evaluate(`[...document.querySelectorAll('#revisions tr[data-revision="4"] .role')].map(x => x.textContent)`, &roles))
	assert.Equal(t, []string{"candidate", "rollback to 1"}, roles)

	// Another rollback while revision 4 rolls out: the gateway's 409 in the form.
	var refused string
	br.run(t, "a refused rollback",
		chromedp.Click(`#rollback`, chromedp.ByQuery),
		chromedp.WaitVisible(`#rollback-form`, chromedp.ByQuery),
		chromedp.SetValue(`#rollback-to`, "2", chromedp.ByQuery),
		chromedp.Click(`#confirm-rollback`, chromedp.ByQuery),
		chromedp.WaitVisible(`#rollback-form .form-error`, chromedp.ByQuery),
		chromedp.Text(`#rollback-form .form-error`, &refused, chromedp.ByQuery),
	)
	assert.Contains(t, refused, "Rollback refused")
	assert.Contains(t, refused, "still rolling out")
	assert.Contains(t, refused, "HTTP 409")
	v = s.getEndpoint(t).JSON200
	require.NotNil(t, v)
	assert.Equal(t, 4, v.Current, "the refused rollback made no revision")

	br.noPageErrorsBut(t, func(e string) bool {
		return strings.Contains(e, "/endpoints/chat/rollback") && strings.Contains(e, "status of 409")
	})
}

// msText is how the page writes a latency (views/endpoints.ts fmtMs).
func msText(ms float64) string {
	switch {
	case ms >= 10_000:
		return strconv.FormatFloat(ms/1000, 'f', 0, 64) + " s"
	case ms >= 1000:
		return strconv.FormatFloat(ms/1000, 'f', 1, 64) + " s"
	case ms >= 10:
		return strconv.FormatFloat(float64(int(ms+0.5)), 'f', 0, 64) + " ms"
	}
	return strconv.FormatFloat(ms, 'f', 1, 64) + " ms"
}
