package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// models ls lists each model's aliases (alias=version, by name; "-" for
// none) from the list route; -o json is the route's answer as is.
func TestModelsLsShowsAliases(t *testing.T) {
	created := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	body := `{"items":[` +
		`{"name":"resnet","description":"vision","latest":4,"createdAt":"2026-11-01T00:00:00Z","createdBy":"alice","aliases":{"champion":3,"candidate":4}},` +
		`{"name":"bert","description":"","latest":1,"createdAt":"2026-11-01T00:00:00Z","createdBy":"bob","aliases":{}}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/projects/vision/models" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "unexpected "+r.URL.Path, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	t.Setenv("ATELIER_CONFIG", filepath.Join(t.TempDir(), "config.yaml"))
	t.Setenv("ATELIER_URL", srv.URL)
	t.Setenv("ATELIER_TOKEN", "tok")
	t.Setenv("ATELIER_PROJECT", "vision")
	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		o := &options{stdout: &out, stderr: &out, now: func() time.Time { return created.Add(2 * time.Hour) }}
		cmd := modelsCmd(o)
		cmd.PersistentFlags().StringVarP(&o.output, "output", "o", outTable, "")
		cmd.SetArgs(args)
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	lines := strings.Split(strings.TrimSpace(run("ls")), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two models:\n%s", strings.Join(lines, "\n"))
	}
	fields := func(l string) []string { return strings.Fields(l) }
	if got := fields(lines[0]); strings.Join(got, " ") != "MODEL LATEST ALIASES CREATED BY DESCRIPTION" {
		t.Fatalf("header: %q", lines[0])
	}
	if got := strings.Join(fields(lines[1]), " "); got != "resnet 4 candidate=4,champion=3 2h alice vision" {
		t.Fatalf("resnet: %q", got)
	}
	if got := strings.Join(fields(lines[2]), " "); got != "bert 1 - 2h bob" {
		t.Fatalf("bert: %q", got)
	}

	// -o json: the list as the route answered it.
	var got, want any
	if err := json.Unmarshal([]byte(run("ls", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(body), &want); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("-o json:\n%s\nwant\n%s", gb, wb)
	}
}
