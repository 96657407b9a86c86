package integration

import (
	"encoding/json"
	"fmt"
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

// The runs list sorted by a metric, in a real browser against a real
// stack: three runs of train-metrics (accuracy 0.94, 0.95 and 0.86, from
// their lr). With the pipeline filter, the page suggests the metrics of
// the newest run; sorted by train.accuracy it lists the three highest
// first with each one's value in a Metric column, as REST lists them, then
// lowest first; a lower bound leaves one out; the URL carries it all (a
// reload shows the same list and fields); the gateway's 400 (a lower
// bound above the upper) is shown at the field it names; and "newest
// first" goes back to the plain list. Any other script error or CSP
// violation fails the test.
//
// ATELIER_UI_SCREENSHOTS=<dir> writes docs/img/ui-runs-metric.png (see
// TestWebUIRunPageInBrowser).
func TestWebUIRunsByMetricInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a Temporal dev server and Chromium")
	}
	path := chromiumPath(t)
	s := newStack(t)
	s.createPipeline("train-metrics", trainMetricsPipeline)
	var ids []string
	for _, lr := range []float64{0.1, 0.2, 0.5} {
		r := s.waitTerminal(s.start("train-metrics", map[string]any{"lr": lr}), time.Minute)
		require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
		ids = append(ids, r.Id)
	}
	a, b, c := ids[0], ids[1], ids[2] // accuracy 0.94, 0.95, 0.86

	type row struct {
		Run, Value, Text string
	}
	byREST := func(q string) []row {
		t.Helper()
		code, body := s.raw("GET", s.path("/runs?pipeline=train-metrics&%s", q), nil)
		require.Equal(t, 200, code, "%s", body)
		var list gen.RunList
		require.NoError(t, json.Unmarshal(body, &list))
		var out []row
		for _, r := range list.Runs {
			require.NotNil(t, r.MetricValue, "%s", body)
			v := fmt.Sprint(*r.MetricValue)
			out = append(out, row{Run: r.Id, Value: v, Text: v})
		}
		return out
	}

	br := newBrowser(t, path)
	shots := os.Getenv("ATELIER_UI_SCREENSHOTS")
	br.signIn(t, s.url, s.token)
	rows := func() []row {
		t.Helper()
		var out []row
		br.run(t, "read the runs", chromedp.Evaluate(`[...document.querySelectorAll("#runs tbody tr")].map(tr => ({
			run: tr.dataset.run,
			value: tr.querySelector("td.metric")?.dataset.value ?? "",
			text: tr.querySelector("td.metric")?.textContent ?? "",
		}))`, &out))
		return out
	}
	// waitList waits until the URL carries want and the list shows n runs.
	waitList := func(what, want string, n int) {
		t.Helper()
		br.run(t, what, chromedp.PollFunction(`(want, n) => decodeURIComponent(location.hash).includes(want) && document.querySelectorAll("#runs tbody tr").length === n`,
			nil, chromedp.WithPollingArgs(want, n), chromedp.WithPollingTimeout(30*time.Second)))
	}

	// The pipeline filter offers the sort, with the metrics of its newest run.
	var suggested []string
	br.run(t, "filter by the pipeline",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/runs?pipeline=train-metrics"),
		chromedp.WaitVisible(`#metric-sort #filter-metric`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelectorAll("#runs tbody tr").length === 3`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Poll(`document.querySelectorAll("#metric-names option").length > 0`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Evaluate(`[...document.querySelectorAll("#metric-names option")].map(o => o.value).sort()`, &suggested),
	)
	assert.Equal(t, []string{"train.accuracy", "train.epochs"}, suggested, "the scalars of the newest run (loss is a series)")
	assert.Equal(t, []row{{Run: c}, {Run: b}, {Run: a}}, rows(), "newest first, no metric column")

	// Highest first.
	br.run(t, "sort by train.accuracy",
		chromedp.SendKeys(`#filter-metric`, "train.accuracy", chromedp.ByQuery),
		chromedp.Click(`#metric-apply`, chromedp.ByQuery),
	)
	waitList("sorted highest first", "metric=train.accuracy&metricOrder=desc", 3)
	br.run(t, "the metric column", chromedp.WaitVisible(`#metric-head`, chromedp.ByQuery))
	want := []row{{b, "0.95", "0.95"}, {a, "0.94", "0.94"}, {c, "0.86", "0.86"}}
	assert.Equal(t, want, rows())
	assert.Equal(t, want, byREST("metric=train.accuracy"), "as REST lists them")
	if shots != "" {
		br.screenshot(t, filepath.Join(shots, "ui-runs-metric.png"))
	}

	// Lowest first.
	br.run(t, "lowest first",
		chromedp.SetValue(`#filter-metric-order`, "asc", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#filter-metric-order").dispatchEvent(new Event("change"))`, nil),
	)
	waitList("sorted lowest first", "metricOrder=asc", 3)
	br.run(t, "the list lowest first", br.waitText(`#metric-head`, "↑"))
	assert.Equal(t, []row{{c, "0.86", "0.86"}, {a, "0.94", "0.94"}, {b, "0.95", "0.95"}}, rows())
	var head string
	br.run(t, "the column says the order", chromedp.Text(`#metric-head`, &head, chromedp.ByQuery))
	assert.Equal(t, "train.accuracy ↑", head)

	// A lower bound leaves c out.
	br.run(t, "at least 0.9",
		chromedp.SendKeys(`#filter-metric-min`, "0.9", chromedp.ByQuery),
		chromedp.Click(`#metric-apply`, chromedp.ByQuery),
	)
	waitList("bounded", "metricMin=0.9", 2)
	bounded := []row{{a, "0.94", "0.94"}, {b, "0.95", "0.95"}}
	assert.Equal(t, bounded, rows())
	assert.Equal(t, bounded, byREST("metric=train.accuracy&metricOrder=asc&metricMin=0.9"))

	// The URL carries it: a reload shows the same list and fields.
	var hash string
	var fields []string
	br.run(t, "reload",
		chromedp.Reload(),
		chromedp.WaitVisible(`#metric-head`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelectorAll("#runs tbody tr").length === 2`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Evaluate(`decodeURIComponent(location.hash)`, &hash),
		chromedp.Evaluate(`["#filter-pipeline", "#filter-metric", "#filter-metric-order", "#filter-metric-min", "#filter-metric-max"].map(s => document.querySelector(s).value)`, &fields),
	)
	assert.Equal(t, "#/p/"+s.project+"/runs?pipeline=train-metrics&metric=train.accuracy&metricOrder=asc&metricMin=0.9", hash)
	assert.Equal(t, []string{"train-metrics", "train.accuracy", "asc", "0.9", ""}, fields)
	assert.Equal(t, bounded, rows())

	// The gateway judges the bounds: its 400 is shown at the field it names.
	var fieldError, invalid, box string
	br.run(t, "a lower bound above the upper",
		chromedp.SendKeys(`#filter-metric-max`, "0.5", chromedp.ByQuery),
		chromedp.Click(`#metric-apply`, chromedp.ByQuery),
		chromedp.WaitVisible(`.field-error[data-field="metricMin"]`, chromedp.ByQuery),
		chromedp.Text(`.field-error[data-field="metricMin"]`, &fieldError, chromedp.ByQuery),
		chromedp.AttributeValue(`#filter-metric-min`, "aria-invalid", &invalid, nil, chromedp.ByQuery),
		chromedp.Text(`section.runs .alert.error`, &box, chromedp.ByQuery),
	)
	assert.Equal(t, "is above metricMax", fieldError)
	assert.Equal(t, "true", invalid)
	assert.Contains(t, box, "query.metricMin: is above metricMax (HTTP 400)")

	// Newest first again.
	br.run(t, "back to newest first",
		chromedp.Click(`#metric-clear`, chromedp.ByQuery),
		chromedp.Poll(`!location.hash.includes("metric=") && document.querySelectorAll("#runs tbody tr").length === 3 && !document.querySelector("#metric-head")`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Evaluate(`decodeURIComponent(location.hash)`, &hash),
	)
	assert.Equal(t, "#/p/"+s.project+"/runs?pipeline=train-metrics", hash)
	assert.Equal(t, []row{{Run: c}, {Run: b}, {Run: a}}, rows())

	// The deliberate 400 is the only error the browser logged.
	br.noPageErrorsBut(t, func(e string) bool {
		return strings.Contains(e, "/v1/projects/"+s.project+"/runs?") && strings.Contains(e, "status of 400")
	})
}
