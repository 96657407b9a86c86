package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

// A project secret on the real stack: written through REST, used by a
// step as an environment variable, and afterwards found nowhere but in
// the step's process: not in a pg_dump of the catalogue (in clear or as
// hex), not in `temporal workflow show`, not in any REST answer about the
// run or the secret, not in the captured log (redacted) or the failed
// step's error. Tenancy and roles as for every project resource.
func TestSecretsReachOnlyTheStep(t *testing.T) {
	s := newStack(t)
	value := fmt.Sprintf("pw-%d-Zq8sL0", time.Now().UnixNano())
	put := func(v string) (int, []byte) {
		b, _ := json.Marshal(map[string]string{"value": v})
		return s.raw("PUT", s.path("/secrets/db-password"), b)
	}
	// The CLI reads the value from standard input, never from argv.
	config := filepath.Join(t.TempDir(), "config.yaml")
	require.Equal(t, 0, atelierCLI(t, config, "login", s.url, "--token", s.token, "--project", s.project).code)
	cli := exec.Command(atelierBinary(t), "secrets", "set", "db-password")
	cli.Env = append(os.Environ(), "ATELIER_CONFIG="+config, "ATELIER_URL=", "ATELIER_TOKEN=", "ATELIER_PROJECT=")
	cli.Stdin = strings.NewReader("first value, replaced\n")
	out, err := cli.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "created secret db-password (version 1)")
	code, body := put(value)
	require.Equal(t, 200, code, "%s", body)
	var sec gen.Secret
	require.NoError(t, json.Unmarshal(body, &sec))
	assert.Equal(t, 2, sec.Version)

	// Bad input: every problem with its path; nothing stored.
	code, body = s.raw("PUT", s.path("/secrets/Bad_Name"), []byte(`{"value": ""}`))
	assert.Contains(t, []int{400, 422}, code, "%s", body)
	code, body = s.raw("PUT", s.path("/secrets/ok"), []byte(`{"value": "x", "extra": 1}`))
	assert.Equal(t, 400, code, "unknown field: %s", body)
	huge, _ := json.Marshal(map[string]string{"value": strings.Repeat("x", 70<<10)})
	code, body = s.raw("PUT", s.path("/secrets/ok"), huge)
	assert.Contains(t, []int{400, 413, 422}, code, "a 70 KiB value: %s", body)
	code, body = s.raw("PUT", s.path("/secrets/ok"), []byte(`{"value": "a\u0000b"}`))
	assert.Contains(t, []int{400, 422}, code, "a NUL byte: %s", body)
	code, _ = s.raw("GET", s.path("/secrets/ok"), nil)
	assert.Equal(t, 404, code, "nothing stored by refused writes")

	// Another tenant cannot see, probe or overwrite it; a viewer cannot write.
	other := s.asProject("other-team")
	code, _ = other.raw("GET", fmt.Sprintf("/v1/projects/%s/secrets/db-password", s.project), nil)
	assert.Equal(t, 404, code, "another project's secret")
	code, _ = other.raw("GET", other.path("/secrets/db-password"), nil)
	assert.Equal(t, 404, code)
	viewer := *s
	viewer.token = s.newToken("viewer", tokens.RoleViewer)
	code, _ = viewer.raw("PUT", s.path("/secrets/db-password"), []byte(`{"value": "overwritten"}`))
	assert.Equal(t, 403, code)
	code, body = viewer.raw("GET", s.path("/secrets"), nil)
	require.Equal(t, 200, code)
	assert.Contains(t, string(body), `"db-password"`)

	// A spec refers by name; a bad reference is a 422 with its path.
	code, prob := s.push("bad-secret", `
steps:
  - name: a
    container: {command: ["true"], env: {X: "1"}, secrets: [{name: "No!", env: X}]}
`)
	require.Equal(t, 422, code)
	assert.Contains(t, prob, "steps[0].container.secrets[0].name")
	assert.Contains(t, prob, "steps[0].container.secrets[0].env")

	s.createPipeline("uses-secret", `
steps:
  - name: use
    container:
      command: ["sh", "-c", "echo \"pw=$DB_PASSWORD\"; printf '{\"sum\": \"%s\", \"echo\": \"%s\"}' \"$(printf %s \"$DB_PASSWORD\" | sha256sum | cut -c1-16)\" \"$DB_PASSWORD\" > $ATELIER_OUTPUTS"]
      secrets: [{name: db-password, env: DB_PASSWORD}]
  - name: fails
    dependsOn: [use]
    container:
      command: ["sh", "-c", "echo \"login refused for $DB_PASSWORD\"; exit 2"]
      secrets: [{name: db-password, env: DB_PASSWORD}]
`)
	// Where the value must not be.
	hexValue := hex.EncodeToString([]byte(value))
	notIn := func(where, text string) {
		t.Helper()
		assert.NotContains(t, text, value, "the value is in %s", where)
		assert.NotContains(t, strings.ToLower(text), hexValue, "the value is in %s (hex)", where)
	}
	// A webhook receiver outside the platform: it gets the failure, never
	// the value.
	rc := &receiver{seen: map[string]int{}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	hook, err := s.client().CreateWebhookWithResponse(context.Background(), s.project, gen.WebhookCreate{
		Url: srv.URL + "/hook", Events: []gen.WebhookEvent{"run.finished", "step.failed"}})
	require.NoError(t, err)
	require.Equal(t, 201, hook.StatusCode(), "%s", hook.Body)
	// Another that opts in to the step output errors quote: redacted too.
	rcOut := &receiver{seen: map[string]int{}}
	srvOut := httptest.NewServer(rcOut)
	t.Cleanup(srvOut.Close)
	hookOut, err := s.client().CreateWebhookWithResponse(context.Background(), s.project, gen.WebhookCreate{
		Url: srvOut.URL + "/hook", Events: []gen.WebhookEvent{"step.failed"}, IncludeStepOutput: ptrTo(true)})
	require.NoError(t, err)
	require.Equal(t, 201, hookOut.StatusCode(), "%s", hookOut.Body)

	id := s.start("uses-secret", nil)
	r := s.waitTerminal(id, 90*time.Second)
	require.Equal(t, gen.RunStateFAILED, r.State)
	use := stepByName(r, "use")
	require.Equal(t, gen.StepStateSUCCEEDED, use.State)
	sum := sha256.Sum256([]byte(value))
	outputs, _ := use.Outputs.(map[string]any)
	assert.Equal(t, hex.EncodeToString(sum[:])[:16], outputs["sum"], "the process got the value")
	assert.Equal(t, "[secret db-password]", outputs["echo"], "outputs are redacted")
	assert.Equal(t, "pw=[secret db-password]\n", s.stepLog(id, "use", nil))
	fails := stepByName(r, "fails")
	assert.Contains(t, val(fails.Error), "login refused for [secret db-password]")

	require.Eventually(t, func() bool {
		a := rc.accepted()
		return len(a["run.finished"]) > 0 && len(a["step.failed"]) > 0
	}, 30*time.Second, 100*time.Millisecond, "the webhook deliveries")
	require.Eventually(t, func() bool { return len(rcOut.accepted()["step.failed"]) > 0 }, 30*time.Second, 100*time.Millisecond,
		"the opted-in webhook's delivery")
	for _, r := range []*receiver{rc, rcOut} {
		r.mu.Lock()
		for _, req := range r.requests {
			notIn("a webhook delivery", string(req.body))
		}
		r.mu.Unlock()
	}
	failed, _ := json.Marshal(rc.accepted()["step.failed"])
	assert.Contains(t, string(failed), "command exited with code 2 (output left out)", "the delivery carries the error, not what the step printed")
	assert.NotContains(t, string(failed), "login refused")
	failedOut, _ := json.Marshal(rcOut.accepted()["step.failed"])
	assert.Contains(t, string(failedOut), "login refused for [secret db-password]", "an opted-in delivery carries the output, redacted")

	// Missing secret: the step fails at once, saying which.
	s.createPipeline("missing-secret", `
steps:
  - name: a
    container: {command: ["true"], secrets: [{name: nope, env: X}]}
`)
	r = s.waitTerminal(s.start("missing-secret", nil), 60*time.Second)
	require.Equal(t, gen.RunStateFAILED, r.State)
	assert.Contains(t, val(stepByName(r, "a").Error), `no secret "nope"`)

	dump, err := exec.Command("pg_dump", "--data-only", s.cfg.DatabaseURL).CombinedOutput()
	require.NoError(t, err, "%s", dump)
	require.Contains(t, string(dump), "db-password", "the dump has the secret's row")
	notIn("a pg_dump of the catalogue", string(dump))
	require.NotNil(t, hook.JSON201.Secret)
	assert.NotContains(t, string(dump), *hook.JSON201.Secret, "the webhook's signing secret is sealed too")
	notIn("temporal workflow show", payloadsDecoded(t, temporalCLI(t, s, "workflow", "show", "--workflow-id", id, "--output", "json")))
	notIn("temporal workflow describe", payloadsDecoded(t, temporalCLI(t, s, "workflow", "describe", "--workflow-id", id, "--output", "json")))
	for _, p := range []string{"/runs/" + id, "/runs/" + id + "/steps/use/logs", "/runs/" + id + "/steps/fails/logs", "/secrets", "/secrets/db-password", "/secret-events"} {
		code, body := s.raw("GET", s.path("%s", p), nil)
		require.Equal(t, 200, code, "GET %s: %s", p, body)
		notIn("GET "+p, string(body))
	}
	code, body = s.raw("GET", s.path("/secret-events"), nil)
	require.Equal(t, 200, code)
	assert.Contains(t, string(body), `"replaced"`)
	assert.Contains(t, string(body), `"created"`)

	r2 := atelierCLI(t, config, "secrets", "list")
	require.Equal(t, 0, r2.code, r2.stderr)
	assert.Contains(t, r2.stdout, "db-password")
	notIn("atelier secrets list", r2.stdout)

	// Deleted: gone, and audited.
	code, _ = s.raw("DELETE", s.path("/secrets/db-password"), nil)
	assert.Equal(t, 204, code)
	code, _ = s.raw("GET", s.path("/secrets/db-password"), nil)
	assert.Equal(t, 404, code)
}

// A secret given as a file on the local runtime: the step reads it at
// $ATELIER_SECRETS/<file>, readable by the step's user only (0400); what
// it echoes is redacted; the file is gone from the worker's disk once
// the process has ended; a reference with both env and file is a 422.
func TestSecretFilesOnTheLocalRuntime(t *testing.T) {
	s := newStack(t)
	value := fmt.Sprintf(`{"key": "sa-%d"}`, time.Now().UnixNano())
	b, _ := json.Marshal(map[string]string{"value": value})
	code, body := s.raw("PUT", s.path("/secrets/gcp-sa"), b)
	require.Equal(t, 201, code, "%s", body)
	s.createPipeline("secret-file", `
steps:
  - name: use
    container:
      command: [sh, -c, 'f="$ATELIER_SECRETS/credentials.json"; printf "{\"mode\": \"%s\", \"dir\": \"%s\"}" "$(stat -c %a "$f")" "$ATELIER_SECRETS" > "$ATELIER_OUTPUTS"; cat "$f"']
      secrets: [{name: gcp-sa, file: credentials.json}]
`)
	id := s.start("secret-file", nil)
	r := s.waitTerminal(id, time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	out, _ := stepByName(r, "use").Outputs.(map[string]any)
	assert.Equal(t, "400", out["mode"], "only the step's user reads it")
	dir, _ := out["dir"].(string)
	require.NotEmpty(t, dir)
	_, err := os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "the secret files outlived the process: %v", err)
	assert.NotContains(t, s.stepLog(id, "use", nil), value, "the log is redacted")

	code, problems := s.push("bad-secret-file", `
steps:
  - name: use
    container:
      command: [sh, -c, "true"]
      secrets: [{name: gcp-sa, env: A, file: b}, {name: gcp-sa, file: ../x}]
`)
	require.Equal(t, 422, code)
	assert.Contains(t, problems, "steps[0].container.secrets[0]")
	assert.Contains(t, problems, "steps[0].container.secrets[1].file")
}
