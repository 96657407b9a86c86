package rayjob

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/activities/kube/framework"
)

// The entrypoint wrapper runs the user's command with its exit code intact
// and prints what it wrote to $ATELIER_OUTPUTS as a marker line.
func TestWrapEntrypointPrintsOutputsMarker(t *testing.T) {
	dir := t.TempDir()
	outputs := filepath.Join(dir, "out.json")
	for _, tc := range []struct {
		entrypoint string
		wantCode   int
		wantMarker string
	}{
		{`printf '{"accuracy": 0.93,\n "it'"'"'s": "quoted"}' > "$ATELIER_OUTPUTS"; echo training done`, 0, `{"accuracy": 0.93, "it's": "quoted"}`},
		{`echo no outputs`, 0, ""},
		{`printf '{"partial": true}' > "$ATELIER_OUTPUTS"; exit 3`, 3, `{"partial": true}`},
	} {
		_ = os.Remove(outputs)
		cmd := exec.Command("sh", "-c", wrapEntrypoint(tc.entrypoint))
		cmd.Env = append(os.Environ(), "ATELIER_OUTPUTS="+outputs)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.wantCode {
			t.Errorf("%q: exit %d, want %d (%s)", tc.entrypoint, code, tc.wantCode, out)
		}
		marker := ""
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, OutputsMarker) {
				marker = strings.TrimPrefix(l, OutputsMarker)
			}
		}
		if marker != tc.wantMarker {
			t.Errorf("%q: marker %q, want %q\n%s", tc.entrypoint, marker, tc.wantMarker, out)
		}
	}
}

// The submitter script submits once, follows the logs, and writes the last
// marker line to the termination log. A fake `ray` CLI stands in for the
// cluster; it records its arguments.
func TestSubmitterScriptCarriesOutputsToTerminationLog(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	fake := `#!/bin/sh
printf '%s|' "$@" | tr '\n' ' ' >> ` + calls + `; echo >> ` + calls + `
case "$2" in
  status) exit 1 ;;
  submit) echo "submitted" ;;
  logs) echo "epoch 1"; echo '` + OutputsMarker + `{"old": 1}'; echo '` + framework.MetricsMarker + `{"loss": [0.9, 0.5]}'; echo '` + OutputsMarker + `{"accuracy": 0.93}'; echo bye ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "ray"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := submitterScript(wrapEntrypoint("python train.py --name 'x y'"), map[string]any{"pip": []any{"torch"}})
	if err != nil {
		t.Fatal(err)
	}
	term := filepath.Join(dir, "termination-log")
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "RAY_DASHBOARD_ADDRESS=head-svc:8265",
		"RAY_JOB_SUBMISSION_ID=train-a1-abc", "ATELIER_TERMINATION_LOG="+term)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got, _ := os.ReadFile(term)
	if string(got) != framework.MetricsMarker+`{"loss": [0.9, 0.5]}`+"\n"+`{"accuracy": 0.93}` {
		t.Errorf("termination log %q", got)
	}
	c, _ := os.ReadFile(calls)
	lines := strings.Split(strings.TrimSpace(string(c)), "\n")
	// Arguments are '|'-separated: the entrypoint reaches ray as ONE
	// argument, which Ray runs with a shell on the head.
	if len(lines) != 3 || !strings.HasPrefix(lines[1], `job|submit|--address|http://head-svc:8265|--no-wait|--runtime-env-json|{"pip":["torch"]}|--submission-id|train-a1-abc|--|sh -c '(`) ||
		lines[2] != "job|logs|--address|http://head-svc:8265|--follow|train-a1-abc|" {
		t.Errorf("ray calls:\n%s", c)
	}
}

// The wrapper prints the metrics file as a marker line before the outputs
// one; a step that wrote none prints none.
func TestWrapEntrypointPrintsMetricsMarker(t *testing.T) {
	dir := t.TempDir()
	outputs, metrics := filepath.Join(dir, "out.json"), filepath.Join(dir, "metrics.json")
	cmd := exec.Command("sh", "-c", wrapEntrypoint(`printf '{"loss":\n [0.9, 0.5]}' > "$ATELIER_METRICS"; printf '{"ok": true}' > "$ATELIER_OUTPUTS"`))
	cmd.Env = append(os.Environ(), "ATELIER_OUTPUTS="+outputs, "ATELIER_METRICS="+metrics)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := "\n" + framework.MetricsMarker + `{"loss": [0.9, 0.5]}` + "\n\n" + OutputsMarker + `{"ok": true}` + "\n"
	if string(out) != want {
		t.Errorf("wrapper printed %q, want %q", out, want)
	}

	_ = os.Remove(metrics)
	cmd = exec.Command("sh", "-c", wrapEntrypoint(`echo trained`))
	cmd.Env = append(os.Environ(), "ATELIER_OUTPUTS="+outputs+".none", "ATELIER_METRICS="+metrics)
	if out, err = cmd.CombinedOutput(); err != nil || strings.Contains(string(out), framework.MetricsMarker) {
		t.Errorf("no metrics written: %v %q", err, out)
	}
}

// Metrics that would push the outputs past the termination message's
// 4 KiB are dropped, saying so in the log; the outputs are kept whole.
func TestSubmitterScriptDropsMetricsThatDoNotFit(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	dir := t.TempDir()
	series := "[" + strings.Repeat("0.123456,", 500) + "1]"
	fake := `#!/bin/sh
case "$2" in
  status) exit 1 ;;
  logs) echo '` + framework.MetricsMarker + `{"loss": ` + series + `}'; echo '` + OutputsMarker + `{"accuracy": 0.93}' ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "ray"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := submitterScript(wrapEntrypoint("python train.py"), nil)
	if err != nil {
		t.Fatal(err)
	}
	term := filepath.Join(dir, "termination-log")
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "RAY_DASHBOARD_ADDRESS=head-svc:8265",
		"RAY_JOB_SUBMISSION_ID=train-a1-abc", "ATELIER_TERMINATION_LOG="+term)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got, _ := os.ReadFile(term); string(got) != `{"accuracy": 0.93}` {
		t.Errorf("termination log %q", got)
	}
	if !strings.Contains(string(out), "[atelier] the step's metrics (4534 bytes) are not kept") {
		t.Errorf("the log does not say the metrics were dropped:\n%s", out)
	}
}
