package launcher

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/internal/platform/launch"
)

// runIn runs the launcher around a shell command with spec's outputs,
// in a temporary directory, and returns its exit code and Result.
func runIn(t *testing.T, outputs []launch.Output, script string) (int, launch.Result, string) {
	t.Helper()
	dir := t.TempDir()
	spec := launch.Spec{Gateway: "http://127.0.0.1:9", ResultPath: filepath.Join(dir, "result"), Outputs: outputs}
	paths := Paths{Inputs: filepath.Join(dir, "in"), Artifacts: filepath.Join(dir, "art"), Outputs: filepath.Join(dir, "out.json"), Metrics: filepath.Join(dir, "m.json")}
	var log strings.Builder
	t.Setenv(launch.GrantEnv, "the-grant")
	code := Run(context.Background(), spec, "the-grant", paths, []string{"sh", "-c", script}, &log)
	b, err := os.ReadFile(spec.ResultPath)
	if err != nil {
		t.Fatalf("no result: %v (log %q)", err, log.String())
	}
	r, err := launch.ParseResult(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return code, r, log.String()
}

// The command's exit code is the container's, and a failed command is not
// the launcher's failure; a signal shows as a shell reports it.
func TestExitCodes(t *testing.T) {
	if code, r, _ := runIn(t, nil, "exit 3"); code != 3 || r.Error != "" {
		t.Errorf("exit 3: code %d, result %+v", code, r)
	}
	if code, _, _ := runIn(t, nil, "kill -TERM $$"); code != 128+15 {
		t.Errorf("killed by SIGTERM: code %d, want 143", code)
	}
}

// The step's own outputs come back compacted; the grant is not in its
// environment.
func TestOutputsAndEnvironment(t *testing.T) {
	code, r, log := runIn(t, nil, `echo "grant=${ATELIER_LAUNCH_GRANT:-none}"; printf '{ "rows" : 2 }' > "$ATELIER_OUTPUTS"`)
	if code != 0 || string(r.Outputs) != `{"rows":2}` {
		t.Errorf("code %d, outputs %s", code, r.Outputs)
	}
	_ = log // the command's stdout is the container's, not the launcher's log
}

// What the step did wrong fails it for good, naming it: outputs that are
// not JSON, a declared output it did not write, outputs over the 4 KiB
// of a termination message.
func TestBadOutputs(t *testing.T) {
	for _, c := range []struct {
		outputs []launch.Output
		script  string
		says    string
	}{
		{nil, `echo nope > "$ATELIER_OUTPUTS"`, "not JSON"},
		{[]launch.Output{{Name: "model", Path: "model.bin"}}, "true", `did not write its output artifact "model"`},
		{nil, `printf '{"x": "%s"}' "$(head -c 5000 /dev/zero | tr '\0' a)" > "$ATELIER_OUTPUTS"`, "over the 4096"},
	} {
		code, r, _ := runIn(t, c.outputs, c.script)
		if code == 0 || r.Kind != launch.ErrOutputs || !strings.Contains(r.Error, c.says) {
			t.Errorf("%s: code %d, result %+v; want ErrOutputs saying %q", c.script, code, r, c.says)
		}
	}
}

func TestChildEnv(t *testing.T) {
	got := childEnv([]string{"A=1", launch.GrantEnv + "=g", launch.SpecEnv + "={}", "ATELIER_LAUNCHX=keep"})
	if strings.Join(got, " ") != "A=1 ATELIER_LAUNCHX=keep" {
		t.Errorf("childEnv = %q", got)
	}
}
