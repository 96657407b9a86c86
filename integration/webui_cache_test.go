package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// The step cache page in a real browser against a real stack: a run of a
// pipeline with cached steps stores an entry for prepare and one per train
// item; the page lists them with their keys, steps, items, outputs and
// the run that stored them, linked to that run's step; the step filter
// narrows the list; an entry is evicted through the page after a
// confirmation (Keep first leaves it), REST no longer lists it, and the
// next run runs prepare again while train still hits. Any script error or
// CSP violation fails the test.
//
// ATELIER_UI_SCREENSHOTS=<dir> writes docs/img/ui-cache.png (see
// TestWebUIRunPageInBrowser).
func TestWebUICacheInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a Temporal dev server and Chromium")
	}
	path := chromiumPath(t)
	s := newStack(t)
	ctx := context.Background()
	dir := stepScratchDir(t)
	ran := func() []string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "ran"))
		if os.IsNotExist(err) {
			return nil
		}
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "ran"), nil, 0o666))
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	s.createPipeline("cached", cachedPipelineYAML(dir))
	first := s.waitTerminal(s.start("cached", nil), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, first.State, "%s", val(first.Status.Error))
	assert.Equal(t, []string{"prepare", "train 1 0.1", "train 2 0.1", "report 0.9"}, ran())
	prepKey := val(stepByName(first, "prepare").CacheKey)
	require.Len(t, prepKey, 64)

	br := newBrowser(t, path)
	shots := os.Getenv("ATELIER_UI_SCREENSHOTS")
	br.signIn(t, s.url, s.token)
	br.run(t, "open the cache page from the nav",
		chromedp.Click(`#nav-cache`, chromedp.ByQuery),
		chromedp.WaitVisible(fmt.Sprintf(`#cache tr[data-key=%q]`, prepKey), chromedp.ByQuery),
	)
	type row struct {
		Key, Title, Pipeline, Step, Run, RunHref, Attempt, Outputs, Expires string
	}
	var rows []row
	readRows := func() {
		br.run(t, "read the entries", chromedp.Evaluate(`[...document.querySelectorAll("#cache tbody tr")].map(tr => {
			const td = tr.querySelectorAll("td");
			return {
				key: tr.dataset.key,
				title: td[0].title,
				pipeline: td[1].textContent,
				step: td[2].textContent,
				run: td[3].querySelector("a").textContent,
				runHref: td[3].querySelector("a").getAttribute("href"),
				attempt: td[3].querySelector(".muted").textContent,
				outputs: td[6].textContent,
				expires: td[5].textContent,
			};
		})`, &rows))
	}
	readRows()
	base := "#/p/" + s.project + "/runs/" + first.Id
	require.Len(t, rows, 3, "prepare and the two train items: %+v", rows)
	byStep := map[string]row{}
	for _, r := range rows {
		byStep[r.Step] = r
	}
	prep := byStep["prepare"]
	assert.Equal(t, row{Key: prepKey, Title: prepKey, Pipeline: "cached", Step: "prepare", Run: first.Id, RunHref: base + "/steps/prepare", Attempt: "attempt 1", Outputs: "rows=150", Expires: prep.Expires}, prep)
	assert.NotEqual(t, "never", prep.Expires, "prepare has a ttl of 1h")
	for i := range 2 {
		r := byStep[fmt.Sprintf("train [item %d]", i)]
		assert.Equal(t, fmt.Sprintf("%s/steps/train?item=%d", base, i), r.RunHref, "%+v", rows)
		assert.Equal(t, "acc=0.9", r.Outputs)
		assert.Equal(t, "never", r.Expires, "train's cache block has no ttl")
	}

	// The run that stored an entry, at the step.
	var hash string
	br.run(t, "follow an entry to its run",
		chromedp.Click(fmt.Sprintf(`#cache tr[data-key=%q] a.run-link`, prepKey), chromedp.ByQuery),
		chromedp.WaitVisible(`#drawer`, chromedp.ByQuery),
		chromedp.WaitVisible(`g.node[data-step="prepare"][data-state="SUCCEEDED"]`, chromedp.ByQuery),
		chromedp.Evaluate(`location.hash`, &hash),
	)
	assert.Equal(t, base+"/steps/prepare", hash)

	// The step filter, in the URL.
	br.run(t, "filter by step",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/cache"),
		chromedp.WaitVisible(fmt.Sprintf(`#cache tr[data-key=%q]`, prepKey), chromedp.ByQuery),
		chromedp.SendKeys(`#cache-step`, "prepare", chromedp.ByQuery),
		chromedp.Click(`section.cache form.filters button[type="submit"]`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelectorAll("#cache tbody tr").length === 1 && location.hash.includes("step=prepare")`, nil, chromedp.WithPollingTimeout(30*time.Second)),
	)
	readRows()
	require.Len(t, rows, 1)
	assert.Equal(t, prepKey, rows[0].Key)

	// Evict it: Keep leaves it, Evict entry removes it.
	var confirm string
	br.run(t, "ask to evict, then keep",
		chromedp.Click(fmt.Sprintf(`#cache tr[data-key=%q] button.evict`, prepKey), chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm-evict`, chromedp.ByQuery),
		chromedp.Text(`#confirm-evict .confirm-text`, &confirm, chromedp.ByQuery),
	)
	assert.Contains(t, confirm, "Evict the entry "+prepKey[:12]+" of step prepare (stored by run "+first.Id+")")
	if shots != "" {
		br.run(t, "the whole list, for the screenshot",
			chromedp.Click(`#confirm-evict-no`, chromedp.ByQuery),
			chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/cache"),
			chromedp.WaitVisible(fmt.Sprintf(`#cache tr[data-key=%q] button.evict`, prepKey), chromedp.ByQuery),
			chromedp.Click(fmt.Sprintf(`#cache tr[data-key=%q] button.evict`, prepKey), chromedp.ByQuery),
			chromedp.WaitVisible(`#confirm-evict`, chromedp.ByQuery),
		)
		br.screenshot(t, filepath.Join(shots, "ui-cache.png"))
		br.run(t, "back to the filter",
			chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/cache?step=prepare"),
			chromedp.WaitVisible(fmt.Sprintf(`#cache tr[data-key=%q] button.evict`, prepKey), chromedp.ByQuery),
			chromedp.Click(fmt.Sprintf(`#cache tr[data-key=%q] button.evict`, prepKey), chromedp.ByQuery),
			chromedp.WaitVisible(`#confirm-evict`, chromedp.ByQuery),
		)
	}
	br.run(t, "keep it",
		chromedp.Click(`#confirm-evict-no`, chromedp.ByQuery),
		chromedp.WaitNotVisible(`#confirm-evict`, chromedp.ByQuery),
	)
	list, err := s.client().ListCacheEntriesWithResponse(ctx, s.project, &gen.ListCacheEntriesParams{Step: ptrTo("prepare")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, list.StatusCode(), "%s", list.Body)
	require.Len(t, list.JSON200.Entries, 1, "Keep evicts nothing")

	var flash string
	br.run(t, "evict it",
		chromedp.Click(fmt.Sprintf(`#cache tr[data-key=%q] button.evict`, prepKey), chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm-evict-yes`, chromedp.ByQuery),
		chromedp.Click(`#confirm-evict-yes`, chromedp.ByQuery),
		chromedp.WaitVisible(`#no-entries`, chromedp.ByQuery),
		chromedp.Text(`#cache-flash`, &flash, chromedp.ByQuery),
	)
	assert.Equal(t, "Evicted the entry "+prepKey[:12]+"… of step prepare.", flash)

	// REST agrees: prepare's entry is gone, train's are not.
	all, err := s.client().ListCacheEntriesWithResponse(ctx, s.project, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, all.StatusCode(), "%s", all.Body)
	var steps []string
	for _, e := range all.JSON200.Entries {
		assert.NotEqual(t, prepKey, e.Key)
		steps = append(steps, e.Step)
	}
	assert.Equal(t, []string{"train", "train"}, steps)

	// So the next run runs prepare again, and train still hits.
	second := s.waitTerminal(s.start("cached", nil), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, second.State, "%s", val(second.Status.Error))
	assert.Equal(t, []string{"prepare", "report 0.9"}, ran())
	assert.Equal(t, gen.StepStateCACHED, stepByName(second, "train").State)
	br.run(t, "the new entry appears on the refreshed page",
		chromedp.WaitVisible(fmt.Sprintf(`#cache tr[data-run=%q][data-step="prepare"]`, second.Id), chromedp.ByQuery),
	)
	br.noPageErrors(t)
}

// signIn opens the UI at url and signs in with token (the runs list then shows).
func (b *browser) signIn(t *testing.T, url, token string) {
	t.Helper()
	b.run(t, "sign in",
		chromedp.Navigate(url+"/ui/"),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, token, chromedp.ByQuery),
		chromedp.Click(`#login`, chromedp.ByQuery),
		chromedp.WaitVisible(`section.runs`, chromedp.ByQuery),
	)
}
