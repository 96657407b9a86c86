package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/examples/gopipeline"
)

// The web UI in a real browser (headless Chromium driven over the DevTools
// protocol) against a real stack: log in with a token, watch a run's DAG
// go from planned to SUCCEEDED through the event stream, read a step's
// log while it runs and an item's log after, and cancel a second run from
// its page. Any script error or Content-Security-Policy violation on the
// pages fails the test.
//
// ATELIER_UI_SCREENSHOTS=<dir> writes the screenshots used in docs/
// (docs/img/ui-*.png): ATELIER_UI_SCREENSHOTS=$PWD/docs/img go test
// ./integration -run TestWebUI.
func TestWebUIRunPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a Temporal dev server and Chromium")
	}
	browser := chromiumPath(t)
	s := newStack(t)
	cl := s.client()
	ctx := context.Background()
	gate := stepScratchDir(t)

	// A pipeline whose first step waits for a file the test creates once
	// the page showed it running; train reads prepare's outputs (an
	// implicit dependency) and fans out, beside validate; deploy depends
	// on evaluate only through its condition.
	s.createPipeline("ui-demo", fmt.Sprintf(`
description: The browser test's pipeline.
params:
  - {name: dataset, type: string, default: iris}
steps:
  - name: prepare
    container:
      command: [sh, -c]
      args:
        - |
          set -eu
          echo "preparing dataset $DATASET"
          while [ ! -e %[1]s/go ]; do sleep 0.1; done
          echo "prepared 150 rows"
          printf '{"rows": 150}\n' > "$ATELIER_OUTPUTS"
      env: {DATASET: "{{ params.dataset }}"}
  - name: validate
    dependsOn: [prepare]
    container: {command: [sh, -c, 'echo "schema ok"']}
  - name: train
    forEach: {items: [0.01, 0.1, 0.3]}
    container:
      command: [sh, -c, 'echo "training lr=$LR on $ROWS rows"; printf "{\"accuracy\": 0.9}" > "$ATELIER_OUTPUTS"']
      env: {LR: "{{ item }}", ROWS: "{{ steps.prepare.outputs.rows }}"}
  - name: evaluate
    dependsOn: [train, validate]
    container:
      command: [sh, -c, 'echo "best accuracy 0.9"; printf "{\"accuracy\": 0.9}" > "$ATELIER_OUTPUTS"']
  - name: deploy
    when: steps.evaluate.outputs.accuracy >= 0.8
    container: {command: [sh, -c, 'echo "deploying <model> & friends"']}
`, gate))
	s.createPipeline("long-wait", `
steps:
  - name: wait
    container: {command: [sh, -c, 'echo "waiting for a cancel"; sleep 300']}
  - name: after
    dependsOn: [wait]
    container: {command: [sh, -c, 'echo never']}
`)
	runID := s.start("ui-demo", map[string]any{"dataset": "mnist"})

	b := newBrowser(t, browser)
	shots := os.Getenv("ATELIER_UI_SCREENSHOTS")

	// Log in; the runs list shows the run.
	b.run(t, "log in",
		chromedp.Navigate(s.url+"/"), // redirects to /ui/
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, s.token, chromedp.ByQuery),
		chromedp.Click(`#login`, chromedp.ByQuery),
		chromedp.WaitVisible(fmt.Sprintf(`#runs tr[data-run=%q]`, runID), chromedp.ByQuery),
	)
	var stored string
	b.run(t, "token storage", chromedp.Evaluate(`sessionStorage.getItem("atelier.token") + "|" + localStorage.length + "|" + location.href`, &stored))
	assert.Equal(t, s.token+"|0|"+s.url+"/ui/#/p/"+s.project+"/runs", stored, "token in sessionStorage only, never in the URL")

	// The run page: planned steps first, the first one running and its
	// log followed live.
	b.run(t, "open the run page",
		chromedp.Click(fmt.Sprintf(`#runs tr[data-run=%q] a`, runID), chromedp.ByQuery),
		chromedp.WaitVisible(`g.node[data-step="prepare"][data-state="RUNNING"]`, chromedp.ByQuery),
	)
	assert.Equal(t, map[string]string{"prepare": "RUNNING", "validate": "PENDING", "train": "PENDING", "evaluate": "PENDING", "deploy": "PENDING"}, b.nodeStates(t))
	var edges int
	b.run(t, "count edges", chromedp.Evaluate(`document.querySelectorAll("svg.dag path.edge").length`, &edges))
	assert.Equal(t, 5, edges, "prepare→train and evaluate→deploy come from expressions, the others from dependsOn")
	b.run(t, "follow the running step's log",
		chromedp.Click(`g.node[data-step="prepare"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#drawer #log`, chromedp.ByQuery),
		b.waitText(`#log`, "preparing dataset mnist"),
		chromedp.WaitVisible(`#log-status[data-log="streaming"]`, chromedp.ByQuery),
	)
	if shots != "" {
		b.screenshot(t, filepath.Join(shots, "ui-run-running.png"))
	}
	require.NoError(t, os.WriteFile(filepath.Join(gate, "go"), nil, 0o644))
	b.run(t, "the followed log ends with the attempt",
		b.waitText(`#log`, "prepared 150 rows"),
		chromedp.WaitVisible(`#log-status[data-log="complete"]`, chromedp.ByQuery),
	)

	// Every node reaches SUCCEEDED through the event stream (no reload).
	b.run(t, "the DAG goes to SUCCEEDED",
		chromedp.WaitVisible(`#run-state[data-state="SUCCEEDED"]`, chromedp.ByQuery),
		chromedp.WaitReady(`section.run[data-live="ended"]`, chromedp.ByQuery),
		chromedp.Poll(`[...document.querySelectorAll("g.node")].every(n => n.getAttribute("data-state") === "SUCCEEDED")`, nil, chromedp.WithPollingTimeout(30*time.Second)),
	)
	assert.Equal(t, map[string]string{"prepare": "SUCCEEDED", "validate": "SUCCEEDED", "train": "SUCCEEDED", "evaluate": "SUCCEEDED", "deploy": "SUCCEEDED"}, b.nodeStates(t))
	var trainLine string
	b.run(t, "forEach collapsed to counts", chromedp.Evaluate(`document.querySelector('g.node[data-step="train"] text.sub').textContent`, &trainLine))
	assert.Equal(t, "3 items · 3 succeeded", trainLine)

	// A forEach item's log, and user data rendered as text.
	b.run(t, "an item's log",
		chromedp.Click(`g.node[data-step="train"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#items tr[data-item="1"]`, chromedp.ByQuery),
		chromedp.Click(`#items tr[data-item="1"] a`, chromedp.ByQuery),
		b.waitText(`#log`, "training lr=0.1 on 150 rows"),
		chromedp.WaitVisible(`#outputs`, chromedp.ByQuery),
	)
	if shots != "" {
		b.screenshot(t, filepath.Join(shots, "ui-run-foreach.png"))
		b.run(t, "a step's drawer",
			chromedp.Click(`g.node[data-step="prepare"]`, chromedp.ByQuery),
			b.waitText(`#log`, "prepared 150 rows"),
		)
		b.screenshot(t, filepath.Join(shots, "ui-run.png"))
	}
	var deployLog string
	b.run(t, "markup in a log stays text",
		chromedp.Click(`g.node[data-step="deploy"]`, chromedp.ByQuery),
		b.waitText(`#log`, "deploying"),
		chromedp.Evaluate(`document.querySelector("#log").textContent + "|" + document.querySelectorAll("#log *").length`, &deployLog),
	)
	assert.Equal(t, "deploying <model> & friends\n|0", deployLog)

	// Cancel from the page of a second run.
	waitID := s.start("long-wait", nil)
	b.run(t, "cancel a run from its page",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/runs/"+waitID),
		chromedp.WaitVisible(`g.node[data-step="wait"][data-state="RUNNING"]`, chromedp.ByQuery),
		chromedp.Click(`#cancel-run`, chromedp.ByQuery),
		chromedp.WaitVisible(`#cancel-reason`, chromedp.ByQuery),
		chromedp.SendKeys(`#cancel-reason`, "stopped from the browser test", chromedp.ByQuery),
		chromedp.Click(`#confirm-cancel`, chromedp.ByQuery),
		chromedp.WaitVisible(`#run-state[data-state="CANCELLED"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`g.node[data-step="wait"][data-state="CANCELLED"]`, chromedp.ByQuery),
	)
	r, err := cl.GetRunWithResponse(ctx, s.project, waitID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.StatusCode())
	assert.Equal(t, gen.RunStateCANCELLED, r.JSON200.State)
	require.NotNil(t, r.JSON200.Status.Cancel)
	assert.Equal(t, "stopped from the browser test", r.JSON200.Status.Cancel.Reason)
	assert.Contains(t, r.JSON200.Status.Cancel.Requester, "ci-editor", "cancelled with the logged-in token")
	var temporalLink string
	b.run(t, "Temporal UI link", chromedp.AttributeValue(`#temporal-link`, "href", &temporalLink, nil, chromedp.ByQuery))
	require.NotNil(t, r.JSON200.Links.TemporalUI)
	assert.Equal(t, *r.JSON200.Links.TemporalUI, temporalLink)
	after := stepByName(*r.JSON200, "after")
	assert.Empty(t, after.Attempts, "the step after the cancel never started")
	assert.Equal(t, string(after.State), b.nodeStates(t)["after"])

	// Approve a waiting approval step from its drawer (the example's
	// approval needs an editor and a comment; the token is an editor).
	approve, err := os.ReadFile("../examples/pipelines/approve-deploy.yaml")
	require.NoError(t, err)
	s.createPipeline("approve-deploy", string(approve))
	approveID := s.start("approve-deploy", nil)
	b.run(t, "an approval step waits",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/runs/"+approveID),
		chromedp.WaitVisible(`g.node[data-step="approve-deploy"][data-state="WAITING_FOR_APPROVAL"]`, chromedp.ByQuery),
		chromedp.Click(`g.node[data-step="approve-deploy"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#approve`, chromedp.ByQuery),
		chromedp.SendKeys(`#approval-comment`, "looks good <b>", chromedp.ByQuery),
	)
	if shots != "" {
		b.screenshot(t, filepath.Join(shots, "ui-approval.png"))
	}
	b.run(t, "approve it",
		chromedp.Click(`#approve`, chromedp.ByQuery),
		chromedp.WaitVisible(`#run-state[data-state="SUCCEEDED"]`, chromedp.ByQuery),
		chromedp.WaitReady(`section.run[data-live="ended"]`, chromedp.ByQuery),
		chromedp.Click(`g.node[data-step="deploy"]`, chromedp.ByQuery),
		b.waitText(`#log`, "deploying, approved by ci-editor: looks good <b>"),
	)
	approvedStates := b.nodeStates(t)
	assert.Equal(t, "SUCCEEDED", approvedStates["approve-deploy"])
	assert.Equal(t, "SKIPPED", approvedStates["augment"], "when: params.augment is false")
	assert.Equal(t, "SKIPPED", approvedStates["notify"], "runIf: anyFailed, nothing failed")

	// A Go pipeline has no spec: its steps are drawn as they come,
	// without edges, and the page says why.
	goID := s.startRun(gen.CreateRunRequest{Workflow: ptrTo(gopipeline.Name), Input: goInput(t, map[string]any{"dataset": "iris", "learningRates": []float64{0.1}, "threshold": 0.5})})
	var goNote string
	var goEdges int
	b.run(t, "a Go pipeline's run page",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/runs/"+goID),
		chromedp.WaitVisible(`#run-state[data-state="SUCCEEDED"]`, chromedp.ByQuery),
		chromedp.Text(`.dag-card .note`, &goNote, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("svg.dag path.edge").length`, &goEdges),
	)
	assert.Contains(t, goNote, "A Go pipeline")
	assert.Zero(t, goEdges)
	goStates := b.nodeStates(t)
	assert.Len(t, goStates, len(s.getRun(goID).Status.Steps), "one node per step the run reported: %v", goStates)
	for name, st := range goStates {
		assert.Equal(t, "SUCCEEDED", st, name)
	}
	if shots != "" {
		b.screenshot(t, filepath.Join(shots, "ui-run-go.png"))
	}

	// A failed run: its error, the retried attempt, and Retry.
	s.createPipeline("flaky", `
steps:
  - name: fetch
    retries: {limit: 1, backoff: 1s}
    container: {command: [sh, -c, 'echo "connection refused" >&2; exit 3']}
`)
	failID := s.start("flaky", nil)
	b.run(t, "a failed run",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/runs/"+failID+"/steps/fetch"),
		chromedp.WaitVisible(`#run-state[data-state="FAILED"]`, chromedp.ByQuery),
		chromedp.WaitReady(`section.run[data-live="ended"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#run-error`, chromedp.ByQuery),
		chromedp.WaitVisible(`#attempts tbody[data-attempt="2"]`, chromedp.ByQuery),
		b.waitText(`#log`, "connection refused"),
		b.waitText(`g.node[data-step="fetch"] g.badges`, "2 attempts"),
	)
	if shots != "" {
		b.screenshot(t, filepath.Join(shots, "ui-run-failed.png"))
	}
	var retryOf string
	b.run(t, "retry it",
		chromedp.Click(`#retry-run`, chromedp.ByQuery),
		chromedp.Poll(fmt.Sprintf(`!location.hash.includes(%q) && !!document.querySelector("#run-state")`, failID), nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.WaitVisible(`#run-state[data-state="FAILED"]`, chromedp.ByQuery),
		chromedp.Text(`a[href*="/runs/`+failID+`"]`, &retryOf, chromedp.ByQuery),
	)
	assert.Equal(t, failID, retryOf, "the new run links to the one it retries")

	// The runs list filters by state.
	b.run(t, "runs list filtered by state",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/runs"),
		chromedp.WaitVisible(fmt.Sprintf(`#runs tr[data-run=%q]`, failID), chromedp.ByQuery),
	)
	if shots != "" {
		b.screenshot(t, filepath.Join(shots, "ui-runs.png"))
	}
	var listed []string
	b.run(t, "filter",
		chromedp.SetValue(`#filter-state`, "CANCELLED", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#filter-state").dispatchEvent(new Event("change"))`, nil),
		chromedp.Poll(`location.hash.includes("state=CANCELLED") && document.querySelectorAll("#runs tbody tr").length === 1`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Evaluate(`[...document.querySelectorAll("#runs tbody tr")].map(r => r.getAttribute("data-run"))`, &listed),
	)
	assert.Equal(t, []string{waitID}, listed)

	if shots != "" {
		b.run(t, "pipeline version",
			chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/pipelines/ui-demo"),
			chromedp.WaitVisible(`#spec`, chromedp.ByQuery),
		)
		b.screenshot(t, filepath.Join(shots, "ui-pipeline.png"))
	}
	b.noPageErrors(t)
}

// chromiumPath finds the browser. Under `make test` (ATELIER_REQUIRE_BROWSER,
// set after `make ensure-chromium` installed it) a missing browser fails
// the test; a plain `go test` without one skips it, saying how to get it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	names := []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}
	if p := os.Getenv("ATELIER_CHROMIUM"); p != "" {
		names = append([]string{p}, names...)
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("ATELIER_REQUIRE_BROWSER") != "" {
		t.Fatalf("no Chromium found (tried %v; set ATELIER_CHROMIUM): `make ensure-chromium` installs Debian's chromium", names)
	}
	t.Skip("no Chromium: `make ensure-chromium` installs it (make test requires it)")
	return ""
}

// browser is one headless Chromium with a fresh profile, and what its pages
// reported (uncaught exceptions, console errors, CSP violations).
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T, path string) *browser {
	t.Helper()
	// The profile goes once Chromium is gone (this cleanup runs after the
	// one below that stops it). Its helper processes may still write
	// there a moment after the browser exits, which t.TempDir's removal
	// would report as a test failure ("directory not empty"): retry.
	profile, err := os.MkdirTemp("", "atelier-chromium-")
	require.NoError(t, err)
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := os.RemoveAll(profile)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Logf("leaving the Chromium profile %s: %v", profile, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // tests run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1440, 900),
		// No traffic but the test's: no QUIC probes, updates, sync.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: ctx}
	chromedp.ListenTarget(ctx, func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.APITypeError {
				msg = "console.error"
				for _, a := range e.Args {
					msg += " " + string(a.Value) + a.Description
				}
			}
		case *cdplog.EventEntryAdded:
			// CSP violations and failed loads are reported here.
			if e.Entry.Level == cdplog.LevelError {
				msg = fmt.Sprintf("%s: %s (%s)", e.Entry.Source, e.Entry.Text, e.Entry.URL)
			}
		}
		if msg != "" {
			b.mu.Lock()
			b.errors = append(b.errors, msg)
			b.mu.Unlock()
		}
	})
	// The first Run starts Chromium and ties its life to ctx (a timeout
	// here would close the browser when it fired).
	require.NoError(t, chromedp.Run(ctx, cdplog.Enable(), runtime.Enable(), chromedp.EmulateViewport(1440, 1000)), "start Chromium (%s)", path)
	return b
}

// run runs actions with a deadline, failing the test with what it was doing.
func (b *browser) run(t *testing.T, what string, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		// What the page showed: its location, the drawer, the DAG's states.
		var state string
		_ = chromedp.Run(b.ctx, chromedp.Evaluate(`location.href + "\n" + (document.querySelector("#drawer:not([hidden])")?.innerText ?? "(no drawer)") + "\n" +
			[...document.querySelectorAll("g.node")].map(n => n.getAttribute("data-step") + "=" + n.getAttribute("data-state")).join(" ")`, &state))
		t.Fatalf("browser: %s: %v\npage errors: %v\npage: %.3000s", what, err, b.pageErrors(), state)
	}
}

// waitText waits until the element's text contains want.
func (b *browser) waitText(sel, want string) chromedp.Action {
	return chromedp.PollFunction(`(sel, want) => { const el = document.querySelector(sel); return !!el && el.textContent.includes(want); }`,
		nil, chromedp.WithPollingArgs(sel, want), chromedp.WithPollingTimeout(30*time.Second))
}

// nodeStates reads the DAG: step name → the state its node shows.
func (b *browser) nodeStates(t *testing.T) map[string]string {
	t.Helper()
	var out map[string]string
	b.run(t, "read the DAG", chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll("g.node")].map(n => [n.getAttribute("data-step"), n.getAttribute("data-state")]))`, &out))
	return out
}

func (b *browser) screenshot(t *testing.T, path string) {
	t.Helper()
	var png []byte
	// Let the pulse animation and fonts settle.
	b.run(t, "screenshot", chromedp.Sleep(300*time.Millisecond), chromedp.CaptureScreenshot(&png))
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("wrote %s", path)
}

func (b *browser) pageErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

func (b *browser) noPageErrors(t *testing.T) {
	t.Helper()
	assert.Empty(t, b.pageErrors(), "script errors, failed loads or CSP violations on the pages")
}
