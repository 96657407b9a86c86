package integration

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// What the browser test's steps write: train's metrics, and beside the
// CSV files of prepare's dataset a JSON and an SVG file.
const (
	uiMetrics = `{"accuracy": 0.93, "loss": 0.21, "epochs": 3, "eval": {"f1": 0.9}}`
	uiMeta    = `{"rows": 2, "cols": ["x", "y"]}`
	uiSVG     = `<?xml version="1.0"?><!-- a plot --><svg xmlns="http://www.w3.org/2000/svg" width="40" height="20"><rect width="40" height="20" fill="#16a34a"/></svg>`
)

// A step's artifacts in the run page's drawer, in a real browser against a
// real stack (a directory store: the gateway streams the bytes): outputs
// and inputs with their names, types, sizes, digests, producer ("from
// <step>.<artifact> of run <id>", linked when another run made it) and
// consumers; the metrics preview as a table, an image preview (a Blob URL
// the CSP allows), a directory's files with a text preview; downloads that
// save the right bytes; and a store that answers 503 or an artifact gone
// (404), shown in the section while the rest of the page works.
func TestWebUIArtifactsInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a Temporal dev server and Chromium")
	}
	path := chromiumPath(t)
	s := newStack(t)

	// prepare writes a dataset directory; train reads it and writes a
	// model, its metrics and a PNG curve (cached, so a second run reuses
	// them); each item of sweep writes its score; evaluate reads the model.
	curve := testPNG(t, 240, 90)
	s.createPipeline("ui-artifacts", fmt.Sprintf(`
steps:
  - name: prepare
    container:
      command: [sh, -c]
      args:
        - |
          set -eu
          mkdir -p "$ATELIER_ARTIFACTS/data/train"
          printf "1,2\n" > "$ATELIER_ARTIFACTS/data/train/a.csv"
          printf "3,4\n" > "$ATELIER_ARTIFACTS/data/b.csv"
          printf '%%s' "$META" > "$ATELIER_ARTIFACTS/data/meta.json"
          printf '%%s' "$SVG" > "$ATELIER_ARTIFACTS/data/plot.svg"
      env:
        META: '%s'
        SVG: '%s'
      artifacts:
        outputs: [{name: dataset, path: data, type: dataset}]
  - name: train
    cache: {}
    container:
      command: [sh, -c]
      args:
        - |
          set -eu
          cat "$ATELIER_INPUTS/dataset/train/a.csv" "$ATELIER_INPUTS/dataset/b.csv" > "$ATELIER_ARTIFACTS/model.bin"
          printf '%%s' "$METRICS" > "$ATELIER_ARTIFACTS/metrics.json"
          printf '%s' > "$ATELIER_ARTIFACTS/curve.png"
      env:
        METRICS: '%s'
      artifacts:
        inputs: [{name: dataset, from: prepare.dataset}]
        outputs:
          - {name: model, path: model.bin, type: model}
          - {name: metrics, path: metrics.json, type: metrics}
          - {name: curve, path: curve.png}
  - name: sweep
    forEach: {items: [1, 2]}
    container:
      command: [sh, -c, 'printf "{\"item\": %%s}" "$ITEM" > "$ATELIER_ARTIFACTS/score.json"']
      env: {ITEM: "{{ item }}"}
      artifacts:
        outputs: [{name: score, path: score.json, type: metrics}]
  - name: evaluate
    container:
      command: [sh, -c, 'test "$(cat "$ATELIER_INPUTS/model")" = "$(printf "1,2\n3,4")"']
      artifacts:
        inputs: [{name: model, from: train.model}]
`, uiMeta, uiSVG, octal(curve), uiMetrics))
	first := s.waitTerminal(s.start("ui-artifacts", nil), 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, first.State, "%s", val(first.Status.Error))
	second := s.waitTerminal(s.start("ui-artifacts", nil), 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, second.State, "%s", val(second.Status.Error))
	require.Equal(t, gen.StepStateCACHED, stepByName(second, "train").State)
	// The pages read lineage, which the run mirror records a moment after
	// the status: wait for it (a 404 meanwhile would be a console error).
	model := val(stepByName(first, "train").Artifacts)[0]
	require.Equal(t, "model", model.Name)
	var lin gen.ArtifactLineage
	var body []byte
	require.Eventually(t, func() bool {
		var code int
		code, body = s.raw("GET", s.path("/artifacts/%s", model.Id), nil)
		return code == 200 && json.Unmarshal(body, &lin) == nil && len(lin.Consumers) == 2
	}, 20*time.Second, 100*time.Millisecond, "the model's consumers: evaluate of both runs")
	for _, r := range []gen.Run{first, second} {
		var ra gen.RunArtifacts
		require.Eventually(t, func() bool {
			var code int
			code, body = s.raw("GET", s.path("/runs/%s/artifacts", r.Id), nil)
			return code == 200 && json.Unmarshal(body, &ra) == nil && len(ra.Produced) > 0
		}, 20*time.Second, 100*time.Millisecond, "lineage of run %s", r.Id)
		t.Logf("run %s artifacts: %s", r.Id, body)
	}

	b := newBrowser(t, path)
	shots := os.Getenv("ATELIER_UI_SCREENSHOTS")
	downloads := t.TempDir()
	b.run(t, "log in and allow downloads",
		cdpbrowser.SetDownloadBehavior(cdpbrowser.SetDownloadBehaviorBehaviorAllow).WithDownloadPath(downloads),
		chromedp.Navigate(s.url+"/ui/"),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, s.token, chromedp.ByQuery),
		chromedp.Click(`#login`, chromedp.ByQuery),
		chromedp.WaitVisible(`#runs`, chromedp.ByQuery),
	)

	// train's drawer: what it wrote and read.
	card := func(role, name string) string {
		return fmt.Sprintf(`#artifacts .artifact[data-role=%q][data-name=%q]`, role, name)
	}
	b.run(t, "train's artifacts",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/runs/"+first.Id+"/steps/train"),
		chromedp.WaitVisible(card("output", "metrics")+` table.metrics`, chromedp.ByQuery),
		chromedp.WaitVisible(card("input", "dataset")+` tr[data-path="train/a.csv"]`, chromedp.ByQuery),
		chromedp.Poll(`(() => { const i = document.querySelector(`+jsString(card("output", "curve")+` img.preview-img`)+`); return !!i && i.complete && i.naturalWidth > 0; })()`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		b.waitText(card("output", "model")+` .consumers`, second.Id),
	)
	var got struct {
		Outputs, Inputs           []string
		Metrics                   map[string]string
		MetricsSize, MetricsType  string
		ModelSize, Digest, Full   string
		Consumers                 string
		ConsumerRuns              []string
		From                      string
		FromRunLinks              int
		DatasetSize, DatasetFiles string
		Files                     []string
		CurveWidth                int
		CurveSrc                  string
		Errors                    int
	}
	b.run(t, "read the section", chromedp.Evaluate(`(() => {
		const q = (sel, root = document) => root.querySelector(sel);
		const card = (role, name) => q('#artifacts .artifact[data-role="' + role + '"][data-name="' + name + '"]');
		const names = role => [...document.querySelectorAll('#artifacts .artifact[data-role="' + role + '"]')].map(c => c.dataset.name);
		const m = card("output", "metrics"), model = card("output", "model"), ds = card("input", "dataset"), img = q("img.preview-img", card("output", "curve"));
		return {
			outputs: names("output"), inputs: names("input"),
			metrics: Object.fromEntries([...m.querySelectorAll("table.metrics tbody tr")].map(r => [r.dataset.metric, q("td.value", r).textContent])),
			metricsSize: q(".size", m).textContent, metricsType: q(".artifact-type", m).textContent,
			modelSize: q(".size", model).textContent, digest: q(".digest", model).textContent, full: q(".digest", model).title,
			consumers: q(".consumers", model).textContent,
			consumerRuns: [...model.querySelectorAll(".consumers a.run-link")].map(a => a.textContent),
			from: q(".from", ds).textContent, fromRunLinks: ds.querySelectorAll(".from a.run-link").length,
			datasetSize: q(".size", ds).textContent, datasetFiles: q(".file-count", ds).textContent,
			files: [...ds.querySelectorAll("tr[data-path]")].map(r => r.dataset.path + " " + q("td.size", r).textContent),
			curveWidth: img.naturalWidth, curveSrc: img.src.slice(0, 5),
			errors: document.querySelectorAll("#artifacts .alert.error").length,
		};
	})()`, &got))
	assert.Equal(t, []string{"model", "metrics", "curve"}, got.Outputs)
	assert.Equal(t, []string{"dataset"}, got.Inputs)
	assert.Equal(t, map[string]string{"accuracy": "0.93", "loss": "0.21", "epochs": "3", "eval.f1": "0.9"}, got.Metrics, "the metrics preview")
	assert.Equal(t, fmt.Sprintf("%d B", len(uiMetrics)), got.MetricsSize)
	assert.Equal(t, "metrics", got.MetricsType)
	assert.Equal(t, "8 B", got.ModelSize)
	assert.Equal(t, model.Digest, got.Full, "the full digest on hover")
	assert.Equal(t, model.Digest[:len("sha256:")+12], got.Digest)
	assert.Contains(t, got.Consumers, "evaluate", "read by this run's evaluate")
	assert.Equal(t, []string{second.Id}, got.ConsumerRuns, "and by the second run's evaluate (the cached model), linked")
	assert.Equal(t, "from prepare.dataset of run "+first.Id, got.From)
	assert.Zero(t, got.FromRunLinks, "this run's own step: no link to another run")
	assert.Equal(t, fmt.Sprintf("%d B", 8+len(uiMeta)+len(uiSVG)), got.DatasetSize)
	assert.Equal(t, "4 files", got.DatasetFiles)
	assert.ElementsMatch(t, []string{"train/a.csv 4 B", "b.csv 4 B", fmt.Sprintf("meta.json %d B", len(uiMeta)), fmt.Sprintf("plot.svg %d B", len(uiSVG))}, got.Files)
	assert.Equal(t, 240, got.CurveWidth, "the PNG preview")
	assert.Equal(t, "blob:", got.CurveSrc)
	assert.Zero(t, got.Errors)

	// A directory's files on demand: JSON pretty-printed, an SVG as an
	// image, CSV as text.
	ds := card("input", "dataset")
	preview := func(path string) string {
		return fmt.Sprintf(`%s tr[data-path=%q] button.preview-file`, ds, path)
	}
	var metaText, csvText string
	b.run(t, "preview the files of a directory",
		chromedp.Click(preview("meta.json"), chromedp.ByQuery),
		chromedp.WaitVisible(ds+` .preview pre[data-format="json"]`, chromedp.ByQuery),
		chromedp.Text(ds+` .preview pre`, &metaText, chromedp.ByQuery),
		chromedp.Click(preview("plot.svg"), chromedp.ByQuery),
		chromedp.Poll(`(() => { const i = document.querySelector(`+jsString(ds+` .preview img.preview-img`)+`); return !!i && i.complete && i.naturalWidth === 40; })()`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Click(preview("train/a.csv"), chromedp.ByQuery),
		chromedp.WaitVisible(ds+` .preview pre[data-format="csv"]`, chromedp.ByQuery),
		chromedp.Text(ds+` .preview pre`, &csvText, chromedp.ByQuery),
	)
	assert.Equal(t, "{\n  \"rows\": 2,\n  \"cols\": [\n    \"x\",\n    \"y\"\n  ]\n}", metaText)
	assert.Equal(t, "1,2", strings.TrimSpace(csvText))
	if shots != "" {
		// Tall enough for the drawer to show the whole section.
		b.run(t, "taller viewport", chromedp.EmulateViewport(1440, 1600), chromedp.Evaluate(`document.querySelector("#drawer").scrollTop = 0`, nil))
		b.screenshot(t, filepath.Join(shots, "ui-artifacts.png"))
		b.run(t, "viewport back", chromedp.EmulateViewport(1440, 1000))
	}

	// Downloads save the artifact's bytes under its name: a file
	// artifact, and one file of a directory.
	b.run(t, "download the metrics", chromedp.Click(card("output", "metrics")+` button.download`, chromedp.ByQuery))
	assert.Equal(t, uiMetrics, waitDownload(t, filepath.Join(downloads, "metrics")))
	b.run(t, "download a file of the dataset", chromedp.Click(card("input", "dataset")+` tr[data-path="b.csv"] button.download`, chromedp.ByQuery))
	assert.Equal(t, "3,4\n", waitDownload(t, filepath.Join(downloads, "b.csv")))
	b.run(t, "download the PNG", chromedp.Click(card("output", "curve")+` button.download`, chromedp.ByQuery))
	assert.Equal(t, string(curve), waitDownload(t, filepath.Join(downloads, "curve")))

	// A forEach item's drawer shows what that item wrote.
	var itemMetrics map[string]string
	b.run(t, "a forEach item's artifacts",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/runs/"+first.Id+"/steps/sweep?item=1"),
		chromedp.WaitVisible(card("output", "score")+` table.metrics`, chromedp.ByQuery),
		chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll("#artifacts table.metrics tbody tr")].map(r => [r.dataset.metric, r.querySelector("td.value").textContent]))`, &itemMetrics),
	)
	assert.Equal(t, map[string]string{"item": "2"}, itemMetrics)

	// The second run: train was a cache hit, so its artifacts were written
	// by the first run, and evaluate read the first run's model.
	var cachedBy, evalFrom string
	var evalLinks []string
	b.run(t, "a cached step's artifacts",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/runs/"+second.Id+"/steps/train"),
		b.waitText(card("output", "model")+` .producer`, first.Id),
		chromedp.Text(card("output", "model")+` .producer`, &cachedBy, chromedp.ByQuery),
		chromedp.Click(`g.node[data-step="evaluate"]`, chromedp.ByQuery),
		b.waitText(card("input", "model")+` .from`, first.Id),
		chromedp.Text(card("input", "model")+` .from`, &evalFrom, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll('#artifacts .artifact[data-name="model"] .from a')].map(a => a.getAttribute("href"))`, &evalLinks),
	)
	assert.Equal(t, "written by train (attempt 1) of run "+first.Id, cachedBy)
	assert.Equal(t, "from train.model of run "+first.Id, evalFrom)
	assert.Equal(t, []string{"#/p/" + s.project + "/runs/" + first.Id + "/steps/train", "#/p/" + s.project + "/runs/" + first.Id}, evalLinks, "the producer's step and run, linked")
	b.noPageErrors(t)

	// Errors stay in the section: the browser's requests for the bytes
	// answer 503 (no artifact store) and a directory's listing 404; the
	// page, the lineage and the log still work.
	ctx := b.ctx
	chromedp.ListenTarget(ctx, func(ev any) {
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		status, detail := 503, "this gateway has no artifact store (ATELIER_ARTIFACTS_URL): artifact bytes cannot be read here"
		if strings.Contains(e.Request.URL, "/files") {
			status, detail = 404, "artifact gone"
		}
		body, _ := json.Marshal(map[string]any{"title": "injected by the test", "status": status, "detail": detail})
		go func() {
			c := chromedp.FromContext(ctx)
			_ = fetch.FulfillRequest(e.RequestID, int64(status)).
				WithResponseHeaders([]*fetch.HeaderEntry{{Name: "Content-Type", Value: "application/problem+json"}}).
				WithBody(base64.StdEncoding.EncodeToString(body)).
				Do(cdp.WithExecutor(ctx, c.Target))
		}()
	})
	var metricsErr, datasetErr string
	b.run(t, "errors in the section",
		fetch.Enable().WithPatterns([]*fetch.RequestPattern{{URLPattern: "*/artifacts/*/content*"}, {URLPattern: "*/artifacts/*/files*"}}),
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/runs/"+first.Id+"/steps/train"),
		chromedp.Reload(),
		chromedp.WaitVisible(card("output", "metrics")+` .alert.error`, chromedp.ByQuery),
		chromedp.WaitVisible(card("input", "dataset")+` .alert.error`, chromedp.ByQuery),
		chromedp.Text(card("output", "metrics")+` .alert.error`, &metricsErr, chromedp.ByQuery),
		chromedp.Text(card("input", "dataset")+` .alert.error`, &datasetErr, chromedp.ByQuery),
		b.waitText(card("output", "model")+` .consumers`, "evaluate"),
		chromedp.WaitVisible(`#log`, chromedp.ByQuery),
		chromedp.WaitVisible(`g.node[data-step="evaluate"][data-state="SUCCEEDED"]`, chromedp.ByQuery),
		fetch.Disable(),
	)
	assert.Contains(t, metricsErr, "no artifact store")
	assert.Contains(t, metricsErr, "HTTP 503")
	assert.Contains(t, datasetErr, "HTTP 404")
	// The injected answers are the only errors the browser logged.
	for _, e := range b.pageErrors() {
		if !(strings.Contains(e, "/artifacts/") && (strings.Contains(e, "status of 503") || strings.Contains(e, "status of 404"))) {
			t.Errorf("page error: %s", e)
		}
	}
}

// waitDownload waits for Chromium to finish saving path and returns its bytes.
func waitDownload(t *testing.T, path string) string {
	t.Helper()
	var b []byte
	require.Eventually(t, func() bool {
		var err error
		if _, e := os.Stat(path + ".crdownload"); e == nil {
			return false
		}
		b, err = os.ReadFile(path)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "no download at %s", path)
	return string(b)
}

// testPNG is a w×h PNG: a falling loss curve on white.
func testPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewPaletted(image.Rect(0, 0, w, h), color.Palette{color.White, color.RGBA{R: 37, G: 99, B: 235, A: 255}, color.RGBA{R: 203, G: 213, B: 225, A: 255}})
	for x := 0; x < w; x++ {
		img.SetColorIndex(x, h-1, 2)
		// loss(x) = e^(-4x/w), drawn 3 px thick between 5% and 95% of the height (rows from the top).
		y := int(float64(h)*0.05 + float64(h)*0.9*(1-math.Exp(-4*float64(x)/float64(w))))
		for d := -1; d <= 1; d++ {
			if yy := y + d; yy >= 0 && yy < h {
				img.SetColorIndex(x, yy, 1)
			}
		}
	}
	for y := 0; y < h; y++ {
		img.SetColorIndex(0, y, 2)
	}
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, img))
	return buf.Bytes()
}

// octal writes bytes as printf escapes (\ooo), for a shell's printf.
func octal(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		fmt.Fprintf(&sb, `\%03o`, c)
	}
	return sb.String()
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
