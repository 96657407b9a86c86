//go:build unix

package local

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
)

type fakeVault map[string]string // project/name → value

func (f fakeVault) Resolve(_ context.Context, project string, names []string) (map[string]string, error) {
	out := map[string]string{}
	for _, n := range names {
		v, ok := f[project+"/"+n]
		if !ok {
			return nil, fmt.Errorf("project %q has no secret %q: %w", project, n, catalog.ErrNotFound)
		}
		out[n] = v
	}
	return out, nil
}

const pw = "hunter2-correct-horse"

// A referenced secret reaches the process as its variable, and nowhere
// else: not in the shipped or local log, not in the outputs, not in the
// failure message.
func TestSecretsReachTheProcessOnly(t *testing.T) {
	h := newHarness(t, WithSecrets(fakeVault{"proj/db": pw, "proj/short": "ab"}))
	req := request("sh", "-c", `test "$DB_PASSWORD" = "`+pw+`" || exit 9
printf 'pw=%s\n' "$DB_PASSWORD"; printf 'half=%s' "${DB_PASSWORD%%-*}"; printf '%s\n' "-${DB_PASSWORD#*-}"
echo "short=$SHORT"
printf '{"echo": "%s", "nested": ["x%sy"]}' "$DB_PASSWORD" "$DB_PASSWORD" > "$ATELIER_OUTPUTS"`)
	req.Secrets = []pipeline.SecretEnv{{Name: "db", Env: "DB_PASSWORD"}, {Name: "short", Env: "SHORT"}}
	res, err := h.run(req)
	if err != nil {
		t.Fatal(err)
	}
	shipped := h.sink.log(t, key(req))
	want := "pw=[secret db]\nhalf=[secret db]\nshort=ab\n"
	if shipped != want {
		t.Fatalf("shipped log %q, want %q", shipped, want)
	}
	local, _ := os.ReadFile(filepath.Join(h.data, "runs", "run-1", "train", "attempt-1", "log"))
	if bytes.Contains(local, []byte(pw)) {
		t.Fatalf("the local log holds the value: %q", local)
	}
	if fmt.Sprint(res.Outputs) != "map[echo:[secret db] nested:[x[secret db]y]]" {
		t.Fatalf("outputs %v", res.Outputs)
	}

	// A failing step's message quotes its log's last lines: redacted too.
	req.Attempt = 2
	req.Command = []string{"sh", "-c", `echo "connecting with $DB_PASSWORD"; exit 3`}
	_, err = h.run(req)
	if err == nil || strings.Contains(err.Error(), pw) || !strings.Contains(err.Error(), "connecting with [secret db]") {
		t.Fatalf("failure message: %v", err)
	}
}

func TestMissingSecretOrKeyFailsForGood(t *testing.T) {
	req := request("true")
	req.Secrets = []pipeline.SecretEnv{{Name: "nope", Env: "X"}}
	h := newHarness(t, WithSecrets(fakeVault{}))
	_, err := h.run(req)
	if ae := appError(t, err, activities.ErrTypeInvalidStep); ae.NonRetryable() != true || !strings.Contains(ae.Error(), `no secret "nope"`) {
		t.Fatalf("missing secret: %v", err)
	}
	h = newHarness(t)
	_, err = h.run(req)
	if ae := appError(t, err, activities.ErrTypeInvalidStep); !strings.Contains(ae.Error(), "no secrets key") {
		t.Fatalf("no key: %v", err)
	}
}

// A secret's value used as a metric's name is redacted like an output's
// key, and so is a bad metrics file's problem that names it.
func TestSecretsNeverNameAMetric(t *testing.T) {
	h := newHarness(t, WithSecrets(fakeVault{"proj/db": pw}))
	req := request("sh", "-c", `printf '{"%s": 1}' "$DB_PASSWORD" > "$ATELIER_METRICS"`)
	req.Secrets = []pipeline.SecretEnv{{Name: "db", Env: "DB_PASSWORD"}}
	res, err := h.run(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics == nil || fmt.Sprint(res.Metrics.Scalars) != "map[[secret db]:1]" {
		t.Fatalf("metrics %+v", res.Metrics)
	}
	req.Attempt = 2
	req.Command = []string{"sh", "-c", `printf '{"%s": "high"}' "$DB_PASSWORD" > "$ATELIER_METRICS"`}
	_, err = h.run(req)
	if err == nil || strings.Contains(err.Error(), pw) || !strings.Contains(err.Error(), "[secret db]: must be a number") {
		t.Fatalf("failure message: %v", err)
	}
	if log := h.sink.log(t, key(req)); strings.Contains(log, pw) {
		t.Fatalf("log %q", log)
	}
}
