package local

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestParseStepUser(t *testing.T) {
	for _, tc := range []struct {
		in      string
		euid    int
		want    *StepUser
		wantErr string
	}{
		{"", 0, &StepUser{UID: DefaultStepUID, GID: DefaultStepUID, Name: "65532"}, ""},
		{"", 1000, nil, ""},
		{"worker", 0, nil, ""},
		{"4000", 0, &StepUser{UID: 4000, GID: 4000, Name: "4000"}, ""},
		{"4000:5000", 0, &StepUser{UID: 4000, GID: 5000, Name: "4000:5000"}, ""},
		{"nobody", 0, &StepUser{UID: 65534, GID: 65534, Name: "nobody"}, ""},
		{"4000", 1000, nil, "must run as root"},
		{"0", 0, nil, "must not run as root"},
		{"root", 0, nil, "is root"},
		{"4000:x", 0, nil, "not a number"},
		{"no-such-user-here", 0, nil, "no-such-user-here"},
	} {
		got, err := ParseStepUser(tc.in, tc.euid)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q as %d: err %v, want %q", tc.in, tc.euid, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q as %d: %v", tc.in, tc.euid, err)
			continue
		}
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("%q as %d: got %+v, want %+v", tc.in, tc.euid, got, tc.want)
		}
	}
}

// TestStepCannotReachTheWorkersSecrets is the local runtime's isolation
// promise when the worker runs as root: the step runs as another user, sees
// none of the worker's environment (not even through /proc/$PPID/environ),
// cannot read the worker's 0600 files next to the data dir nor list other
// runs, and still writes its outputs.
func TestStepCannotReachTheWorkersSecrets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching the step's user needs root")
	}
	t.Setenv("ATELIER_DATABASE_URL", "postgres://secret-in-worker-env")
	if err := HardenWorker(); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	for _, d := range []string{state, filepath.Dir(state)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(state, "admin-token"), []byte("atl_secret_token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(state, "data")
	u, err := ParseStepUser("", 0)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, WithDataDir(data), WithStepUser(u))
	if err := h.runner.CheckDataDir(); err != nil {
		t.Fatal(err)
	}
	// Another run's directory the step must not be able to list.
	if err := mkdirChain(data, "runs", "other-run"); err != nil {
		t.Fatal(err)
	}
	script := `
exec 2>&1
echo "uid=$(id -u) home=$HOME"
env
echo "--- parent environ"; cat /proc/$PPID/environ
echo "--- token"; cat "$PWD/../../../../../../admin-token"
echo "--- runs"; ls "$PWD/../../../.."
echo "--- write"; echo hi > "$PWD/file" && cat "$PWD/file"
printf '{"ok": true}' > "$ATELIER_OUTPUTS"
`
	req := request("sh", "-c", script)
	res, err := h.run(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outputs["ok"] != true {
		t.Fatalf("outputs not read back: %+v", res.Outputs)
	}
	log := h.sink.log(t, key(req))
	for _, secret := range []string{"secret-in-worker-env", "atl_secret_token", "other-run"} {
		if strings.Contains(log, secret) {
			t.Errorf("the step read %q:\n%s", secret, log)
		}
	}
	for _, want := range []string{"uid=" + strconv.Itoa(DefaultStepUID) + " home=", "Permission denied", "--- write\nhi"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

func TestCheckDataDirNamesTheBlockingDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a step user needs root")
	}
	closed := t.TempDir() // its parent is 0700
	r := New(newMemSink(), WithDataDir(filepath.Join(closed, "data")), WithStepUser(&StepUser{UID: 4000, GID: 4000, Name: "4000"}))
	err := r.CheckDataDir()
	if err == nil || !strings.Contains(err.Error(), filepath.Dir(closed)) {
		t.Fatalf("CheckDataDir() = %v, want an error naming %s", err, filepath.Dir(closed))
	}
}
