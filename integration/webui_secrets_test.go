package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

// The secrets page in a real browser against a real stack. Two secrets
// written through REST by two tokens are listed with their versions and
// last writers, never a value. An editor creates a secret by typing its
// value into a password field and replaces another (Replace… fills in the
// name; the form says which version it makes); the field is empty once
// the gateway stored it. A multi-line value is read from a file. A step
// that uses the three secrets sees exactly the values typed and read
// (their digests, as its outputs). A name the gateway's pattern refuses is
// flagged by the page without a request; a value the gateway refuses
// (over 64 KiB) shows its problem at the value field with the error's
// path. Delete… asks first (Keep keeps it) and then deletes it, as REST
// agrees; the audit lists who did what. No value typed ever reaches the
// page's text, an input's value after saving, the URL, storage or the
// console. A viewer reads the list and is offered no form, Replace,
// Delete or audit; a gateway without a secrets key says so, clearly.
//
// ATELIER_UI_SCREENSHOTS=<dir> writes docs/img/ui-secrets.png (see
// TestWebUIRunPageInBrowser).
func TestWebUISecretsInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a Temporal dev server and Chromium")
	}
	path := chromiumPath(t)
	s := newStack(t)
	ctx := context.Background()
	c := s.client()
	stamp := time.Now().UnixNano()
	restValue := fmt.Sprintf("rest-db-%d-Qx", stamp)
	hfValue := fmt.Sprintf("hf_%d_tokenvalue", stamp)
	typed := fmt.Sprintf("typed-S3cr3t-%d!", stamp)
	replaced := fmt.Sprintf("replaced-%d-pw", stamp)
	fileValue := fmt.Sprintf("{\n  \"type\": \"service_account\",\n  \"key\": \"k-%d\"\n}", stamp)
	values := []string{restValue, hfValue, typed, replaced, fileValue, fmt.Sprintf("k-%d", stamp)}

	put := func(cl *gen.ClientWithResponses, name, value string) {
		t.Helper()
		res, err := cl.PutSecretWithResponse(ctx, s.project, name, gen.SecretValue{Value: &value})
		require.NoError(t, err)
		require.Equal(t, 201, res.StatusCode(), "%s", res.Body)
	}
	put(c, "db-password", restValue)
	put(s.clientAs(s.newToken("ops-editor", tokens.RoleEditor)), "hf-token", hfValue)
	getSecret := func(name string) (int, *gen.Secret) {
		t.Helper()
		res, err := c.GetSecretWithResponse(ctx, s.project, name)
		require.NoError(t, err)
		return res.StatusCode(), res.JSON200
	}

	br := newBrowser(t, path)
	// Every console message of the page, whatever its level: a value must be in none.
	var consoleMu sync.Mutex
	var console []string
	chromedp.ListenTarget(br.ctx, func(ev any) {
		if e, ok := ev.(*runtime.EventConsoleAPICalled); ok {
			msg := string(e.Type)
			for _, a := range e.Args {
				msg += " " + string(a.Value) + a.Description
			}
			consoleMu.Lock()
			console = append(console, msg)
			consoleMu.Unlock()
		}
	})
	shots := os.Getenv("ATELIER_UI_SCREENSHOTS")
	br.signIn(t, s.url, s.token)
	row := func(name string) string { return fmt.Sprintf(`#secrets tr[data-secret=%q]`, name) }
	br.run(t, "open the secrets page from the nav",
		chromedp.Click(`#nav-secrets`, chromedp.ByQuery),
		chromedp.WaitVisible(row("hf-token"), chromedp.ByQuery),
		chromedp.WaitVisible(`#secret-events tr[data-secret="hf-token"][data-action="created"]`, chromedp.ByQuery),
	)
	type listed struct{ Name, Version, By, Updated string }
	readList := func() []listed {
		t.Helper()
		var out []listed
		br.run(t, "read the list", chromedp.Evaluate(`[...document.querySelectorAll("#secrets tbody tr")].map(tr => ({
			name: tr.querySelector(".secret-name").textContent,
			version: tr.querySelector(".secret-version").textContent,
			by: tr.querySelector(".secret-by").textContent,
			updated: tr.querySelector(".secret-updated").textContent,
		}))`, &out))
		return out
	}
	list := readList()
	require.Len(t, list, 2)
	assert.Equal(t, listed{"db-password", "v1", "ci-editor", list[0].Updated}, list[0])
	assert.Equal(t, listed{"hf-token", "v1", "ops-editor", list[1].Updated}, list[1])
	_, db := getSecret("db-password")
	assert.Equal(t, db.UpdatedAt.Local().Format("2006-01-02 15:04:05"), list[0].Updated, "as REST has it (the browser and the test share a time zone)")

	// Create: the value goes into a password field, and out of it once stored.
	var kind, hint string
	br.run(t, "type a new secret",
		chromedp.SendKeys(`#secret-name`, "api-key", chromedp.ByQuery),
		chromedp.SendKeys(`#secret-value`, typed, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#secret-value").type`, &kind),
		chromedp.Text(`#secret-form-hint`, &hint, chromedp.ByQuery),
	)
	assert.Equal(t, "password", kind)
	assert.Equal(t, "Creates the secret api-key (version 1).", hint)
	br.run(t, "create it",
		chromedp.Click(`#save-secret`, chromedp.ByQuery),
		chromedp.WaitVisible(`#secret-saved[data-secret="api-key"][data-version="1"]`, chromedp.ByQuery),
		chromedp.WaitVisible(row("api-key")+`[data-version="1"]`, chromedp.ByQuery),
	)
	var fields struct{ Name, Value string }
	readFields := func() {
		t.Helper()
		br.run(t, "read the form", chromedp.Evaluate(`({name: document.querySelector("#secret-name").value, value: document.querySelector("#secret-value").value})`, &fields))
	}
	readFields()
	assert.Equal(t, "", fields.Value, "the value field is emptied once stored")
	assert.Equal(t, "", fields.Name)
	code, sec := getSecret("api-key")
	require.Equal(t, 200, code)
	assert.Equal(t, 1, sec.Version)
	assert.Equal(t, "ci-editor", sec.UpdatedBy)

	// Replace: Replace… fills in the name, the form says what it makes.
	var button string
	br.run(t, "replace db-password",
		chromedp.Click(`.replace-secret[data-secret="db-password"]`, chromedp.ByQuery),
		br.waitText(`#secret-form-hint`, "db-password exists (version 1, last written by ci-editor"),
		chromedp.Text(`#secret-form-hint`, &hint, chromedp.ByQuery),
		chromedp.Text(`#save-secret`, &button, chromedp.ByQuery),
	)
	assert.Contains(t, hint, "saving replaces its value, making version 2")
	assert.Equal(t, "Replace value", button)
	readFields()
	assert.Equal(t, "db-password", fields.Name)
	br.run(t, "save the new value",
		chromedp.SendKeys(`#secret-value`, replaced, chromedp.ByQuery),
		chromedp.Click(`#save-secret`, chromedp.ByQuery),
		chromedp.WaitVisible(`#secret-saved[data-secret="db-password"][data-version="2"]`, chromedp.ByQuery),
		chromedp.WaitVisible(row("db-password")+`[data-version="2"]`, chromedp.ByQuery),
		br.waitText(row("db-password")+` .secret-version`, "v2"),
	)
	readFields()
	assert.Equal(t, "", fields.Value)
	code, sec = getSecret("db-password")
	require.Equal(t, 200, code)
	assert.Equal(t, 2, sec.Version)

	// A multi-line value from a file.
	saFile := filepath.Join(t.TempDir(), "sa.json")
	require.NoError(t, os.WriteFile(saFile, []byte(fileValue+"\n"), 0o600))
	var note string
	var disabled bool
	br.run(t, "read a value from a file",
		chromedp.SendKeys(`#secret-name`, "gcp-sa", chromedp.ByQuery),
		chromedp.SetUploadFiles(`#secret-file`, []string{saFile}, chromedp.ByQuery),
		br.waitText(`#secret-file-note`, "sa.json"),
		chromedp.Text(`#secret-file-note`, &note, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#secret-value").disabled`, &disabled),
	)
	assert.Equal(t, fmt.Sprintf("the value is the text of sa.json (%d bytes)", len(fileValue)), note, "the trailing newline dropped")
	assert.True(t, disabled, "the typed value is not used")
	var files int
	br.run(t, "store it",
		chromedp.Click(`#save-secret`, chromedp.ByQuery),
		chromedp.WaitVisible(`#secret-saved[data-secret="gcp-sa"]`, chromedp.ByQuery),
		chromedp.WaitVisible(row("gcp-sa"), chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#secret-file").files.length`, &files),
		chromedp.Evaluate(`document.querySelector("#secret-value").disabled`, &disabled),
		chromedp.Text(`#secret-file-note`, &note, chromedp.ByQuery),
	)
	assert.Equal(t, 0, files, "the file is forgotten once stored")
	assert.False(t, disabled)
	assert.Empty(t, note)

	// What the page refuses itself: no request.
	var nameErr, valueErr string
	br.run(t, "a bad name and no value",
		chromedp.SendKeys(`#secret-name`, "Bad_Name", chromedp.ByQuery),
		chromedp.Click(`#save-secret`, chromedp.ByQuery),
		chromedp.WaitVisible(`#secret-name-error`, chromedp.ByQuery),
		chromedp.Text(`#secret-name-error`, &nameErr, chromedp.ByQuery),
		chromedp.Text(`#secret-value-error`, &valueErr, chromedp.ByQuery),
	)
	assert.Contains(t, nameErr, "Not a secret name: lowercase letters, digits, '.', '_' and '-'; at most 63")
	assert.Equal(t, "Give a value: a secret's value is not empty.", valueErr)
	code, _ = getSecret("Bad_Name")
	assert.Equal(t, 400, code, "the gateway refuses the name too")

	// What the gateway refuses: its problem at the field, with its path.
	var formErr string
	br.run(t, "a value over 64 KiB",
		chromedp.SetValue(`#secret-name`, "big", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#secret-value").value = "x".repeat(70000)`, nil),
		chromedp.Click(`#save-secret`, chromedp.ByQuery),
		chromedp.WaitVisible(`#secret-form-error`, chromedp.ByQuery),
		chromedp.WaitVisible(`#secret-value-error`, chromedp.ByQuery),
		chromedp.Text(`#secret-value-error`, &valueErr, chromedp.ByQuery),
		chromedp.Text(`#secret-form-error`, &formErr, chromedp.ByQuery),
	)
	assert.Equal(t, "value: maximum string length is 65536", valueErr)
	assert.Contains(t, formErr, "Saving big refused: value: maximum string length is 65536 (HTTP 400)")
	code, _ = getSecret("big")
	assert.Equal(t, 404, code, "nothing stored")
	// A reload starts the form afresh (and the value typed goes with it).
	br.run(t, "reload", chromedp.Reload(), chromedp.WaitVisible(row("gcp-sa"), chromedp.ByQuery))

	// The process gets exactly what was typed and read.
	s.createPipeline("uses-ui-secrets", `
steps:
  - name: use
    container:
      command: ["sh", "-c", "d() { printf %s \"$1\" | sha256sum | cut -c1-16; }; printf '{\"api\": \"%s\", \"db\": \"%s\", \"sa\": \"%s\"}' \"$(d \"$API_KEY\")\" \"$(d \"$DB_PASSWORD\")\" \"$(d \"$(cat \"$ATELIER_SECRETS/sa.json\")\")\" > $ATELIER_OUTPUTS"]
      secrets:
        - {name: api-key, env: API_KEY}
        - {name: db-password, env: DB_PASSWORD}
        - {name: gcp-sa, file: sa.json}
`)
	run := s.waitTerminal(s.start("uses-ui-secrets", nil), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, run.State, "%+v", run)
	digest := func(v string) string { sum := sha256.Sum256([]byte(v)); return hex.EncodeToString(sum[:])[:16] }
	outputs, _ := stepByName(run, "use").Outputs.(map[string]any)
	assert.Equal(t, digest(typed), outputs["api"], "the typed value")
	assert.Equal(t, digest(replaced), outputs["db"], "the replaced value")
	assert.Equal(t, digest(fileValue), outputs["sa"], "the file's text ($(cat) drops the trailing newline the page dropped)")

	// Delete asks first.
	var ask string
	br.run(t, "ask to delete hf-token, then keep it",
		chromedp.Click(`.delete-secret[data-secret="hf-token"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm-secret[data-secret="hf-token"]`, chromedp.ByQuery),
		chromedp.Text(`#confirm-secret .confirm-text`, &ask, chromedp.ByQuery),
	)
	assert.Equal(t, "Delete the secret hf-token (version 1)? Steps that reference it fail from then on, and endpoint replicas that start later wait for it. Its value cannot be read back, so it is gone for good.", ask)
	if shots != "" {
		br.screenshot(t, filepath.Join(shots, "ui-secrets.png"))
	}
	br.run(t, "keep it",
		chromedp.Click(`#confirm-secret-no`, chromedp.ByQuery),
		chromedp.WaitNotVisible(`#confirm-secret`, chromedp.ByQuery),
	)
	code, _ = getSecret("hf-token")
	assert.Equal(t, 200, code, "kept")
	br.run(t, "delete it",
		chromedp.Click(`.delete-secret[data-secret="hf-token"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm-secret-yes`, chromedp.ByQuery),
		chromedp.Click(`#confirm-secret-yes`, chromedp.ByQuery),
		chromedp.WaitVisible(`#secret-deleted[data-secret="hf-token"]`, chromedp.ByQuery),
		chromedp.WaitNotPresent(row("hf-token"), chromedp.ByQuery),
		chromedp.WaitVisible(`#secret-events tr[data-secret="hf-token"][data-action="deleted"]`, chromedp.ByQuery),
	)
	code, _ = getSecret("hf-token")
	assert.Equal(t, 404, code, "deleted")

	// The audit, as REST has it.
	type event struct{ Name, Action, Actor string }
	var shown []event
	br.run(t, "read the audit", chromedp.Evaluate(`[...document.querySelectorAll("#secret-events tbody tr")].map(tr => {
		const td = tr.querySelectorAll("td");
		return {name: td[1].textContent, action: td[2].textContent, actor: td[3].textContent};
	})`, &shown))
	ev, err := c.ListSecretEventsWithResponse(ctx, s.project, nil)
	require.NoError(t, err)
	require.Equal(t, 200, ev.StatusCode(), "%s", ev.Body)
	var rest []event
	for _, e := range ev.JSON200.Items {
		rest = append(rest, event{e.Name, string(e.Action), e.Actor})
	}
	assert.Equal(t, rest, shown)
	assert.Equal(t, []event{
		{"hf-token", "deleted", "ci-editor"}, {"gcp-sa", "created", "ci-editor"}, {"db-password", "replaced", "ci-editor"},
		{"api-key", "created", "ci-editor"}, {"hf-token", "created", "ops-editor"}, {"db-password", "created", "ci-editor"},
	}, shown)

	// No value anywhere the page keeps or shows things.
	var where struct{ Text, Inputs, URL, Storage string }
	br.run(t, "read what the page holds", chromedp.Evaluate(`({
		text: document.body.innerText,
		inputs: [...document.querySelectorAll("input, textarea")].map(i => i.value).join("\n"),
		url: location.href,
		storage: JSON.stringify(sessionStorage) + JSON.stringify(localStorage),
	})`, &where))
	consoleMu.Lock()
	logged := strings.Join(console, "\n")
	consoleMu.Unlock()
	for _, v := range values {
		assert.NotContains(t, where.Text, v, "a value in the page's text")
		assert.NotContains(t, where.Inputs, v, "a value left in a field")
		assert.NotContains(t, where.URL, v, "a value in the URL")
		assert.NotContains(t, where.Storage, v, "a value in storage")
		assert.NotContains(t, logged, v, "a value in the console")
	}
	assert.Equal(t, s.url+"/ui/#/p/"+s.project+"/secrets", where.URL)
	// The refused 70 KB value is the only error the browser logged.
	br.noPageErrorsBut(t, func(e string) bool {
		return strings.Contains(e, "/secrets/big") && strings.Contains(e, "status of 400")
	})

	// A viewer reads the list and is offered nothing else (in a browser
	// of its own, which logs no refused request).
	viewer := s.newToken("viewer", tokens.RoleViewer)
	vb := newBrowser(t, path)
	vb.signIn(t, s.url, viewer)
	var v struct {
		Note                                   string
		Rows                                   []string
		Form, Replace, Delete, Audit, Disabled bool
	}
	vb.run(t, "a viewer's secrets page",
		chromedp.Click(`#nav-secrets`, chromedp.ByQuery),
		chromedp.WaitVisible(row("gcp-sa"), chromedp.ByQuery),
		chromedp.Evaluate(`({
			note: document.querySelector("#secrets-role-note")?.textContent ?? "",
			rows: [...document.querySelectorAll("#secrets tbody tr")].map(tr => tr.dataset.secret + " " + tr.querySelector(".secret-version").textContent + " " + tr.querySelector(".secret-by").textContent),
			form: !!document.querySelector("#secret-form"),
			replace: !!document.querySelector(".replace-secret"),
			delete: !!document.querySelector(".delete-secret"),
			audit: !!document.querySelector("#secret-events-card:not([hidden])"),
		})`, &v),
	)
	assert.Equal(t, "Setting, replacing and deleting secrets needs an editor token of this project (or an admin's); this token (viewer) is a viewer.", v.Note)
	assert.Equal(t, []string{"api-key v1 ci-editor", "db-password v2 ci-editor", "gcp-sa v1 ci-editor"}, v.Rows)
	assert.False(t, v.Form, "no form")
	assert.False(t, v.Replace, "no Replace")
	assert.False(t, v.Delete, "no Delete")
	assert.False(t, v.Audit, "no audit (it needs an editor)")
	vb.noPageErrors(t)
	res, err := s.clientAs(viewer).PutSecretWithResponse(ctx, s.project, "api-key", gen.SecretValue{Value: ptrTo("from a viewer")})
	require.NoError(t, err)
	assert.Equal(t, 403, res.StatusCode(), "%s", res.Body)

	// A gateway without a secrets key: the page says so, and offers nothing.
	nk := newStack(t, stackOptions{noWorker: true, noSecretsKey: true})
	kb := newBrowser(t, path)
	kb.signIn(t, nk.url, nk.token)
	var nokey struct {
		Problem, Status string
		FormShown       bool
		Rows            int
	}
	kb.run(t, "the secrets page without a secrets key",
		chromedp.Click(`#nav-secrets`, chromedp.ByQuery),
		chromedp.WaitVisible(`#secrets-error .alert[data-status="503"] #secrets-no-key`, chromedp.ByQuery),
		chromedp.Evaluate(`({
			problem: document.querySelector("#secrets-error").innerText,
			status: document.querySelector("#secrets-error .alert").dataset.status,
			formShown: !!document.querySelector("#secret-form:not([hidden])"),
			rows: document.querySelectorAll("#secrets tr").length,
		})`, &nokey),
	)
	assert.Contains(t, nokey.Problem, "secrets are not served by this gateway: it has no secrets key (ATELIER_SECRETS_KEY_URL) (HTTP 503)")
	assert.Contains(t, nokey.Problem, "This gateway has no secrets key, so it stores no secrets and steps cannot be given any: its operator sets ATELIER_SECRETS_KEY_URL")
	assert.False(t, nokey.FormShown, "no form without a key")
	assert.Zero(t, nokey.Rows)
	// The browser reports the 503 it was answered, and nothing else.
	kb.noPageErrorsBut(t, func(e string) bool {
		return strings.Contains(e, "/secrets") && strings.Contains(e, "status of 503")
	})
}
