package integration

import (
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

// Metrics and run comparison in a real browser against a real stack: two
// runs of a training pipeline with different learning rates (its step
// writes scalar metrics and a loss curve to $ATELIER_METRICS) are ticked
// on the runs list and compared: the table has a column per run, the lr
// row marked as differing, the more accurate run's accuracy marked best
// and the other's worst, equal rows hidden until "only differences" is
// turned off, and the loss curve drawn with a line per run. A bad
// comparison shows the gateway's problem. A run's page shows its train
// step's metrics: a table of its numbers and a sparkline of the curve.
// Any script error or CSP violation fails the test (but the refused
// comparisons' own 400 and 404).
//
// ATELIER_UI_SCREENSHOTS=<dir> writes docs/img/ui-compare.png (see
// TestWebUIRunPageInBrowser).
func TestWebUICompareInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a Temporal dev server and Chromium")
	}
	path := chromiumPath(t)
	s := newStack(t)
	s.createPipeline("train-metrics", trainMetricsPipeline)
	a := s.waitTerminal(s.start("train-metrics", map[string]any{"lr": 0.1}), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, a.State, "%s", val(a.Status.Error))
	b := s.waitTerminal(s.start("train-metrics", map[string]any{"lr": 0.2}), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, b.State, "%s", val(b.Status.Error))
	// A third run, not compared: the list has more rows than ticked.
	c := s.waitTerminal(s.start("train-metrics", map[string]any{"lr": 0.3}), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, c.State, "%s", val(c.Status.Error))

	br := newBrowser(t, path)
	shots := os.Getenv("ATELIER_UI_SCREENSHOTS")
	pick := func(id string) string { return fmt.Sprintf(`#runs input.pick-run[data-run=%q]`, id) }
	var disabled []bool
	compareDisabled := func() {
		var d bool
		br.run(t, "read the Compare button", chromedp.Evaluate(`document.querySelector("#compare").disabled`, &d))
		disabled = append(disabled, d)
	}
	br.run(t, "log in",
		chromedp.Navigate(s.url+"/ui/"),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, s.token, chromedp.ByQuery),
		chromedp.Click(`#login`, chromedp.ByQuery),
		chromedp.WaitVisible(pick(c.Id), chromedp.ByQuery),
	)
	compareDisabled()
	br.run(t, "tick the newer run", chromedp.Click(pick(b.Id), chromedp.ByQuery), br.waitText(`#compare-count`, "1 selected"))
	compareDisabled()
	br.run(t, "tick the older run", chromedp.Click(pick(a.Id), chromedp.ByQuery), br.waitText(`#compare-count`, "2 selected"))
	compareDisabled()
	assert.Equal(t, []bool{true, true, false}, disabled, "Compare needs 2 runs")

	// The comparison: oldest run first, whatever order they were ticked in.
	br.run(t, "compare them",
		chromedp.Click(`#compare`, chromedp.ByQuery),
		chromedp.WaitVisible(`#compare tr[data-group="param"][data-name="lr"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`.series-chart[data-name="loss"] svg`, chromedp.ByQuery),
	)
	type row struct {
		Class string
		Cells []string
		Best  string
		Worst string
	}
	var got struct {
		Hash     string
		Runs     []string
		States   []string
		Rows     map[string]row
		Lines    []string
		Legend   []string
		Dots     int
		Charts   int
		Problems int
	}
	read := func() {
		br.run(t, "read the comparison", chromedp.Evaluate(`(() => {
			const rows = {};
			for (const r of document.querySelectorAll("#compare tr.row")) {
				rows[r.dataset.group + ":" + (r.dataset.step ? r.dataset.step + "." : "") + r.dataset.name] = {
					class: r.className,
					cells: [...r.querySelectorAll("td")].map(td => td.querySelector(".value, .missing").textContent),
					best: r.querySelector("td.best")?.dataset.run ?? "",
					worst: r.querySelector("td.worst")?.dataset.run ?? "",
				};
			}
			const chart = document.querySelector('.series-chart[data-step="train"][data-name="loss"]');
			return {
				hash: location.hash,
				runs: [...document.querySelectorAll("#compare thead th.run")].map(th => th.dataset.run),
				states: [...document.querySelectorAll("#compare thead th.run .badge")].map(b => b.dataset.state),
				rows,
				lines: [...chart.querySelectorAll("svg g.run-line")].filter(g => g.querySelector("polyline")).map(g => g.dataset.run),
				legend: [...chart.querySelectorAll(".chart-legend li")].map(li => li.dataset.run),
				dots: chart.querySelectorAll("svg circle.dot").length,
				charts: document.querySelectorAll(".series-chart").length,
				problems: document.querySelectorAll(".alert.error").length,
			};
		})()`, &got))
	}
	read()
	assert.Equal(t, "#/p/"+s.project+"/compare?runs="+a.Id+"&runs="+b.Id, got.Hash)
	assert.Equal(t, []string{a.Id, b.Id}, got.Runs, "a column per run, oldest first")
	assert.Equal(t, []string{"SUCCEEDED", "SUCCEEDED"}, got.States)
	assert.Equal(t, map[string]row{
		"param:lr":              {Class: "row differs", Cells: []string{"0.1", "0.2"}},
		"output:train.lr":       {Class: "row differs", Cells: []string{"0.1", "0.2"}},
		"metric:train.accuracy": {Class: "row differs", Cells: []string{"0.94", "0.95"}, Best: b.Id, Worst: a.Id},
	}, got.Rows, "only the differences: epochs (3 in both) is hidden")
	assert.Equal(t, []string{a.Id, b.Id}, got.Lines, "the loss curve: a line per run")
	assert.Equal(t, []string{a.Id, b.Id}, got.Legend)
	assert.Equal(t, 6, got.Dots, "3 points per run")
	assert.Equal(t, 1, got.Charts)
	assert.Zero(t, got.Problems)
	var polylines int
	br.run(t, "count the chart's polylines", chromedp.Evaluate(`document.querySelectorAll(".series-chart svg polyline").length`, &polylines))
	assert.Equal(t, 2, polylines)
	if shots != "" {
		br.screenshot(t, filepath.Join(shots, "ui-compare.png"))
	}

	// Every row, the equal ones too.
	br.run(t, "show the equal rows",
		chromedp.Click(`#only-diffs`, chromedp.ByQuery),
		chromedp.WaitVisible(`#compare tr[data-name="epochs"]`, chromedp.ByQuery),
	)
	read()
	assert.Equal(t, row{Class: "row same", Cells: []string{"3", "3"}}, got.Rows["metric:train.epochs"], "equal: not marked, no best")
	assert.Len(t, got.Rows, 4)
	br.run(t, "differences only again",
		chromedp.Click(`#only-diffs`, chromedp.ByQuery),
		chromedp.WaitNotPresent(`#compare tr[data-name="epochs"]`, chromedp.ByQuery),
	)

	// A comparison the gateway refuses shows its problem.
	var one, unknown string
	br.run(t, "compare one run",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/compare?runs="+a.Id),
		chromedp.WaitVisible(`#compare-host .alert.error`, chromedp.ByQuery),
		chromedp.Text(`#compare-host .alert.error`, &one, chromedp.ByQuery),
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/compare?runs="+a.Id+"&runs=01970000-0000-7000-8000-0000000000ff"),
		br.waitText(`#compare-host .alert.error`, "404"),
		chromedp.Text(`#compare-host .alert.error`, &unknown, chromedp.ByQuery),
	)
	assert.Contains(t, one, "compare 2 to 20 runs, got 1")
	assert.Contains(t, one, "HTTP 400")
	assert.Contains(t, unknown, "01970000-0000-7000-8000-0000000000ff")

	// A run's page: its train step's metrics in the drawer.
	br.run(t, "back to the comparison, then a run's page",
		chromedp.Navigate(s.url+"/ui/"+"#/p/"+s.project+"/compare?runs="+a.Id+"&runs="+b.Id),
		chromedp.WaitVisible(fmt.Sprintf(`#compare thead th.run[data-run=%q] .run-id a`, b.Id), chromedp.ByQuery),
		chromedp.Click(fmt.Sprintf(`#compare thead th.run[data-run=%q] .run-id a`, b.Id), chromedp.ByQuery),
		chromedp.WaitVisible(`g.node[data-step="train"][data-state="SUCCEEDED"]`, chromedp.ByQuery),
		chromedp.WaitReady(`section.run[data-live="ended"]`, chromedp.ByQuery),
		chromedp.Click(`g.node[data-step="train"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#drawer #step-metrics .series[data-series="loss"] svg polyline`, chromedp.ByQuery),
	)
	var drawer struct {
		Hash     string
		Scalars  map[string]string
		Series   []string
		Points   int
		Min, Max string
	}
	br.run(t, "read the step's metrics", chromedp.Evaluate(`(() => {
		const m = document.querySelector("#drawer #step-metrics");
		const loss = m.querySelector('.series[data-series="loss"]');
		return {
			hash: location.hash,
			scalars: Object.fromEntries([...m.querySelectorAll("table.scalars tbody tr")].map(r => [r.dataset.metric, r.querySelector("td.value").textContent])),
			series: [...m.querySelectorAll(".series")].map(x => x.dataset.series),
			points: loss.querySelector("svg.sparkline polyline").getAttribute("points").trim().split(/\s+/).length,
			min: loss.querySelector(".min").textContent,
			max: loss.querySelector(".max").textContent,
		};
	})()`, &drawer))
	assert.Equal(t, "#/p/"+s.project+"/runs/"+b.Id+"/steps/train", drawer.Hash)
	assert.Equal(t, map[string]string{"accuracy": "0.95", "epochs": "3"}, drawer.Scalars)
	assert.Equal(t, []string{"loss"}, drawer.Series)
	assert.Equal(t, 3, drawer.Points)
	assert.Equal(t, "min 0.1", drawer.Min)
	assert.Equal(t, "max 0.9", drawer.Max)

	// The refused comparisons are the only errors the browser logged.
	for _, e := range br.pageErrors() {
		if !(strings.Contains(e, "/compare") && (strings.Contains(e, "status of 400") || strings.Contains(e, "status of 404"))) {
			t.Errorf("page error: %s", e)
		}
	}
}
