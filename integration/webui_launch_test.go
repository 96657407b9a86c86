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

// uiLaunchV2 is the browser test's pipeline with typed params: a string
// with a default, a required integer, a boolean, a number and a list.
const uiLaunchV2 = `
description: Trains with typed params, started from the web UI.
params:
  - {name: greeting, type: string, default: hello, description: What the step says first.}
  - {name: epochs, type: integer, description: Passes over the data.}
  - {name: shout, type: boolean, default: false, description: Say it in capitals.}
  - {name: lr, type: number, default: 0.01}
  - {name: tags, type: array, default: [a, b], description: Free-form labels (a <list> of strings).}
steps:
  - name: train
    container:
      command: [sh, -c]
      args:
        - |
          set -eu
          msg="$GREETING"
          if [ "$SHOUT" = true ]; then msg=$(printf '%s' "$msg" | tr a-z A-Z); fi
          echo "$msg: $EPOCHS epochs at lr $LR"
          printf '{"said": "%s", "epochs": %s}' "$msg" "$EPOCHS" > "$ATELIER_OUTPUTS"
      env:
        GREETING: "{{ params.greeting }}"
        EPOCHS: "{{ params.epochs }}"
        SHOUT: "{{ params.shout }}"
        LR: "{{ params.lr }}"
`

// The launch form in a real browser against a real stack: "Run v2" on the
// pipelines list opens a form built from the version's typed params
// (defaults prefilled, descriptions, the required param marked); the
// gateway's 422 for a missing required param and for a non-integer is
// shown at that field; the fixed form starts the run and lands on its
// page, which succeeds with the submitted params; "Run again with these
// params" on that page opens the form prefilled from the run, and a
// second run starts with one param changed.
//
// ATELIER_UI_SCREENSHOTS=<dir> writes docs/img/ui-launch*.png (see
// TestWebUIRunPageInBrowser).
func TestWebUILaunchInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a Temporal dev server and Chromium")
	}
	path := chromiumPath(t)
	s := newStack(t)
	// v1 has no params; the form is for v2, the newest.
	s.createPipeline("ui-launch", `
steps:
  - name: train
    container: {command: [sh, -c, 'echo v1']}
`)
	s.createPipeline("ui-launch", uiLaunchV2)

	b := newBrowser(t, path)
	shots := os.Getenv("ATELIER_UI_SCREENSHOTS")
	b.run(t, "log in",
		chromedp.Navigate(s.url+"/ui/"),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, s.token, chromedp.ByQuery),
		chromedp.Click(`#login`, chromedp.ByQuery),
		chromedp.WaitVisible(`section.runs .empty`, chromedp.ByQuery), // no run yet
	)

	// The pipelines list has a Run button for the newest version; the
	// page of an older version has its own.
	var button string
	var v1Launch string
	b.run(t, "the Run button of a version",
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/pipelines/ui-launch/versions/1"),
		chromedp.WaitVisible(`#launch`, chromedp.ByQuery),
		chromedp.AttributeValue(`#launch`, "href", &v1Launch, nil, chromedp.ByQuery),
		chromedp.Navigate(s.url+"/ui/#/p/"+s.project+"/pipelines"),
		chromedp.WaitVisible(`a[data-launch="ui-launch"]`, chromedp.ByQuery),
		chromedp.Text(`a[data-launch="ui-launch"]`, &button, chromedp.ByQuery),
		chromedp.Click(`a[data-launch="ui-launch"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#launch-form .field[data-param="tags"]`, chromedp.ByQuery),
	)
	assert.True(t, strings.HasSuffix(v1Launch, "#/p/"+s.project+"/pipelines/ui-launch/versions/1/run"), v1Launch)
	assert.Equal(t, "Run v2", button)

	// One field per param, in spec order, with the input its type needs.
	type field struct {
		Name, Input, Value, Type, Desc, Default string
		Required, Checked                       bool
	}
	readForm := func() []field {
		var out []field
		b.run(t, "read the form", chromedp.Evaluate(`[...document.querySelectorAll("#launch-form .field")].map(f => {
			const i = f.querySelector("input, select, textarea");
			return {
				name: f.dataset.param,
				input: i.tagName.toLowerCase() + (i.type && i.tagName === "INPUT" ? ":" + i.type : ""),
				value: i.type === "checkbox" ? "" : i.value,
				checked: i.type === "checkbox" && i.checked,
				type: f.querySelector(".param-type").textContent,
				desc: f.querySelector(".desc")?.textContent ?? "",
				default: f.querySelector(".default")?.textContent ?? "",
				required: !!f.querySelector(".required"),
			};
		})`, &out))
		return out
	}
	assert.Equal(t, []field{
		{Name: "greeting", Input: "input:text", Value: "hello", Type: "string", Desc: "What the step says first.", Default: `"hello"`},
		{Name: "epochs", Input: "input:number", Value: "", Type: "integer", Desc: "Passes over the data.", Required: true},
		{Name: "shout", Input: "input:checkbox", Type: "boolean", Desc: "Say it in capitals.", Default: "false"},
		{Name: "lr", Input: "input:number", Value: "0.01", Type: "number", Default: "0.01"},
		{Name: "tags", Input: "textarea", Value: "[\n  \"a\",\n  \"b\"\n]", Type: "list (JSON)", Desc: "Free-form labels (a <list> of strings).", Default: `["a","b"]`},
	}, readForm(), "the form of v2's params, defaults prefilled")
	var markup int
	b.run(t, "descriptions stay text", chromedp.Evaluate(`document.querySelectorAll("#launch-form .desc *").length`, &markup))
	assert.Zero(t, markup, "a description's markup is text")

	// The required param left empty: the gateway's 422 names it, and the
	// page shows its message at that field only.
	fieldErr := func(name string) string {
		return fmt.Sprintf(`#launch-form .field[data-param=%q] .field-error`, name)
	}
	var msg, formMsg string
	var marked []string
	readErrors := func() {
		b.run(t, "read the errors",
			chromedp.Text(fieldErr("epochs"), &msg, chromedp.ByQuery),
			chromedp.Text(`#launch-error`, &formMsg, chromedp.ByQuery),
			chromedp.Evaluate(`[...document.querySelectorAll("#launch-form .field.invalid")].map(f => f.dataset.param)`, &marked),
		)
	}
	b.run(t, "submit without the required param",
		chromedp.Click(`#launch-submit`, chromedp.ByQuery),
		chromedp.WaitVisible(fieldErr("epochs"), chromedp.ByQuery),
	)
	readErrors()
	assert.Equal(t, "required param (no default) has no value", msg)
	assert.Equal(t, []string{"epochs"}, marked)
	assert.Contains(t, formMsg, "HTTP 422")

	// A non-integer: the browser sends it, the gateway refuses it. The
	// other fields are edited meanwhile.
	var focused string
	b.run(t, "submit a non-integer",
		chromedp.SendKeys(`#param-epochs`, "2.5", chromedp.ByQuery),
		chromedp.WaitNotPresent(`#launch-form .field.invalid`, chromedp.ByQuery), // editing clears the field's error
		clearField(`#param-greeting`),
		chromedp.SendKeys(`#param-greeting`, "hi there", chromedp.ByQuery),
		chromedp.Click(`#param-shout`, chromedp.ByQuery),
		chromedp.Click(`#launch-submit`, chromedp.ByQuery),
		b.waitText(fieldErr("epochs"), "whole number"),
		chromedp.Evaluate(`document.activeElement.id`, &focused),
	)
	readErrors()
	assert.Equal(t, "must be a whole number, got number 2.5", msg)
	assert.Equal(t, []string{"epochs"}, marked)
	assert.Equal(t, "param-epochs", focused, "the first field in error gets the focus")
	if shots != "" {
		formShot(t, b, filepath.Join(shots, "ui-launch.png"))
	}
	assert.Empty(t, s.listRuns(gen.ListRunsParams{}), "refused starts create no run")

	// Fixed: the run starts, the page is the run's, and it succeeds with
	// the params as submitted (and the defaults of the rest).
	var firstID, shownParams string
	b.run(t, "submit the fixed form",
		clearField(`#param-epochs`),
		chromedp.SendKeys(`#param-epochs`, "3", chromedp.ByQuery),
		chromedp.Click(`#launch-submit`, chromedp.ByQuery),
		chromedp.WaitVisible(`#run-state[data-state="SUCCEEDED"]`, chromedp.ByQuery),
		chromedp.WaitReady(`section.run[data-live="ended"]`, chromedp.ByQuery),
		chromedp.Text(`#run-id`, &firstID, chromedp.ByQuery),
		chromedp.TextContent(`.run-head details pre.json`, &shownParams, chromedp.ByQuery),
	)
	first := s.getRun(firstID)
	assert.Equal(t, "ui-launch", val(first.Pipeline))
	assert.Equal(t, 2, val(first.Version))
	assert.Equal(t, "ci-editor", val(first.CreatedBy), "started with the signed-in token")
	wantParams := map[string]any{"greeting": "hi there", "epochs": 3.0, "shout": true, "lr": 0.01, "tags": []any{"a", "b"}}
	assert.Equal(t, wantParams, val(first.Status.Params))
	assert.Equal(t, map[string]any{"said": "HI THERE", "epochs": 3.0}, stepByName(first, "train").Outputs)
	assert.Contains(t, s.stepLog(firstID, "train", nil), "HI THERE: 3 epochs at lr 0.01")
	assert.Contains(t, shownParams, `"epochs": 3`)
	var runLocation string
	b.run(t, "where the page is", chromedp.Evaluate(`location.hash`, &runLocation))
	assert.Equal(t, "#/p/"+s.project+"/runs/"+firstID, runLocation)

	// Run again from the finished run: the form holds its params; one
	// is changed, and a new run of the same version starts with it.
	var note string
	b.run(t, "run again with these params",
		chromedp.WaitVisible(`#run-again`, chromedp.ByQuery),
		chromedp.Click(`#run-again`, chromedp.ByQuery),
		chromedp.WaitVisible(`#launch-form .field[data-param="tags"]`, chromedp.ByQuery),
		chromedp.Text(`#launch-from`, &note, chromedp.ByQuery),
	)
	assert.Contains(t, note, "Prefilled with the params of run "+firstID)
	assert.Equal(t, []field{
		{Name: "greeting", Input: "input:text", Value: "hi there", Type: "string", Desc: "What the step says first.", Default: `"hello"`},
		{Name: "epochs", Input: "input:number", Value: "3", Type: "integer", Desc: "Passes over the data.", Required: true},
		{Name: "shout", Input: "input:checkbox", Checked: true, Type: "boolean", Desc: "Say it in capitals.", Default: "false"},
		{Name: "lr", Input: "input:number", Value: "0.01", Type: "number", Default: "0.01"},
		{Name: "tags", Input: "textarea", Value: "[\n  \"a\",\n  \"b\"\n]", Type: "list (JSON)", Desc: "Free-form labels (a <list> of strings).", Default: `["a","b"]`},
	}, readForm(), "prefilled from the run")
	b.run(t, "change one param",
		clearField(`#param-epochs`),
		chromedp.SendKeys(`#param-epochs`, "5", chromedp.ByQuery),
	)
	if shots != "" {
		formShot(t, b, filepath.Join(shots, "ui-launch-again.png"))
	}
	var secondID string
	b.run(t, "start it",
		chromedp.Click(`#launch-submit`, chromedp.ByQuery),
		chromedp.Poll(fmt.Sprintf(`location.hash.includes("/runs/") && !location.hash.includes(%q) && !!document.querySelector("#run-state")`, firstID), nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.WaitVisible(`#run-state[data-state="SUCCEEDED"]`, chromedp.ByQuery),
		chromedp.Text(`#run-id`, &secondID, chromedp.ByQuery),
	)
	require.NotEqual(t, firstID, secondID)
	second := s.getRun(secondID)
	assert.Equal(t, 2, val(second.Version))
	wantParams["epochs"] = 5.0
	assert.Equal(t, wantParams, val(second.Status.Params), "the first run's params, epochs changed")
	assert.Nil(t, second.Status.RetryOf, "a new run, not a retry")
	assert.Equal(t, map[string]any{"said": "HI THERE", "epochs": 5.0}, stepByName(second, "train").Outputs)
	assert.Len(t, s.listRuns(gen.ListRunsParams{}), 2)

	// The refused starts are the only errors the browser logged.
	for _, e := range b.pageErrors() {
		if !(strings.Contains(e, "/runs") && strings.Contains(e, "status of 422")) {
			t.Errorf("page error: %s", e)
		}
	}
}

// clearField empties an input as a user would (the page hears an input
// event), before SendKeys types the new value.
func clearField(sel string) chromedp.Action {
	return chromedp.Evaluate(`(() => { const i = document.querySelector(`+jsString(sel)+`); i.value = ""; i.dispatchEvent(new Event("input", {bubbles: true})); })()`, nil)
}

// formShot screenshots the whole form: a viewport tall enough, from the top.
func formShot(t *testing.T, b *browser, path string) {
	t.Helper()
	b.run(t, "taller viewport", chromedp.EmulateViewport(1440, 1180), chromedp.Evaluate(`window.scrollTo(0, 0)`, nil))
	b.screenshot(t, path)
	b.run(t, "viewport back", chromedp.EmulateViewport(1440, 1000))
}
