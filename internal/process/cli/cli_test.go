package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/atelier-ml/atelier/api/gen"
)

func TestSplitPath(t *testing.T) {
	for path, want := range map[string][]string{
		"steps[2].dependsOn[0]": {"steps", "2", "dependsOn", "0"},
		"params":                {"params"},
		"steps[0][1].x":         {"steps", "0", "1", "x"},
		"":                      nil,
	} {
		if got := splitPath(path); !reflect.DeepEqual(got, want) {
			t.Errorf("splitPath(%q) = %q, want %q", path, got, want)
		}
	}
}

// A validation problem is shown at its line in the file; a path into a
// missing field points at the nearest line that exists.
func TestLinesOfFieldErrors(t *testing.T) {
	spec := []byte(`params:
  - name: lr
steps:
  - name: a
    container: {command: [echo]}
  - name: b
    dependsOn: [a, nope]
`)
	errs := []gen.FieldError{{Path: "steps[1].dependsOn[1]"}, {Path: "steps[0].container.image"}, {Path: "steps[5]"}}
	got := lines(spec, &errs)
	want := map[string]int{"steps[1].dependsOn[1]": 7, "steps[0].container.image": 5, "steps[5]": 4}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lines = %v, want %v", got, want)
	}
	if lines([]byte("{not yaml"), &errs) != nil {
		t.Error("an unparsable file has no lines")
	}
}

func TestParseParams(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(file, []byte("epochs: 3\ntag: base\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := parseParams([]string{"lr=0.1", "tag=v1", "flag=true", "empty=", "text={a: b}", "eq=a=b"}, file)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"epochs": float64(3), "tag": "v1", "lr": 0.1, "flag": true, "empty": "", "text": "{a: b}", "eq": "a=b"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("params = %#v, want %#v", got, want)
	}
	if _, err := parseParams([]string{"novalue"}, ""); err == nil {
		t.Error("-p without = is an error")
	}
}

// The config file holds tokens: 0600; flags beat the environment, which
// beats the file's context.
func TestConfigFileAndPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "config.yaml")
	t.Setenv("ATELIER_CONFIG", path)
	t.Setenv("ATELIER_URL", "")
	t.Setenv("ATELIER_TOKEN", "")
	t.Setenv("ATELIER_PROJECT", "")
	o := &options{}
	if _, err := o.target(); err == nil {
		t.Fatal("no URL anywhere is an error")
	}
	f := File{Current: "dev", Contexts: map[string]Context{
		"dev":  {URL: "http://a:1", Token: "t-dev"},
		"prod": {URL: "https://b", Token: "t-prod", Project: "vision"},
	}}
	if err := f.save(path); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config file mode = %v, %v; want 0600", fi.Mode(), err)
	}
	c, err := o.target()
	if err != nil || c != (Context{URL: "http://a:1", Token: "t-dev", Project: defaultProject}) {
		t.Fatalf("current context: %+v %v", c, err)
	}
	t.Setenv("ATELIER_TOKEN", "t-env")
	o.context = "prod"
	if c, _ = o.target(); c != (Context{URL: "https://b", Token: "t-env", Project: "vision"}) {
		t.Errorf("env over context: %+v", c)
	}
	o.token, o.project = "t-flag", "p-flag"
	if c, _ = o.target(); c.Token != "t-flag" || c.Project != "p-flag" {
		t.Errorf("flags over env: %+v", c)
	}
	o.context = "missing"
	if _, err := o.target(); err == nil {
		t.Error("an unknown --context is an error")
	}
}

func TestExitCodes(t *testing.T) {
	for state, want := range map[gen.RunState]int{gen.RunStateSUCCEEDED: 0, gen.RunStateFAILED: 2, gen.RunStateCANCELLED: 3, gen.RunStateTERMINATED: 3} {
		err := exitFor(state, nil)
		code := 0
		if e, ok := err.(*ExitError); ok {
			code = e.Code
		}
		if code != want {
			t.Errorf("%s: exit %d, want %d", state, code, want)
		}
	}
}

// ping needs no token: a ready gateway is exit 0, one whose Temporal is
// down says so, and --wait retries until the gateway is ready.
func TestPing(t *testing.T) {
	var calls atomic.Int32
	readyAfter := int32(3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || r.Header.Get("Authorization") != "" {
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		if calls.Add(1) < readyAfter {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"type":"unavailable","title":"Service Unavailable","status":503,"detail":"not ready: temporal: unavailable"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok","checks":{"database":"ok","temporal":"ok"}}`))
	}))
	defer srv.Close()
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		o := &options{stdout: &out, stderr: &out}
		cmd := pingCmd(o)
		cmd.SetArgs(args)
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		err := cmd.Execute()
		return out.String(), err
	}
	if _, err := run(srv.URL); err == nil || !strings.Contains(err.Error(), "not ready: temporal") {
		t.Fatalf("a gateway that is not ready: %v", err)
	}
	out, err := run(srv.URL, "--wait", "10s")
	if err != nil || !strings.Contains(out, "is ready") || calls.Load() != readyAfter {
		t.Fatalf("--wait: %q, %v after %d calls", out, err, calls.Load())
	}
	if _, err := run("ftp://x"); err == nil {
		t.Fatal("a URL that is not http(s) is refused")
	}
}
