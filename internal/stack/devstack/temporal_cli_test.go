//go:build unix

package devstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeGo puts a `go` on PATH that "builds" a temporal binary after a delay
// and counts its invocations, so the build/lock/progress logic is tested
// without a 10-minute real build.
func fakeGo(t *testing.T, script string) (countFile string) {
	t.Helper()
	bin := t.TempDir()
	countFile = filepath.Join(t.TempDir(), "count")
	body := "#!/bin/sh\necho run >> \"$FAKE_GO_COUNT\"\n" + script
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_GO_COUNT", countFile)
	t.Setenv(EnvCacheDir, t.TempDir())
	t.Setenv(EnvTemporalCLI, "")
	return countFile
}

func TestEnsureTemporalCLIBuildsOnceWithProgress(t *testing.T) {
	count := fakeGo(t, `sleep 1
printf '#!/bin/sh\necho fake temporal\n' > "$GOBIN/temporal"
chmod +x "$GOBIN/temporal"
`)
	old := temporalProgressEvery
	temporalProgressEvery = 200 * time.Millisecond
	t.Cleanup(func() { temporalProgressEvery = old })

	var (
		mu   sync.Mutex
		logs []string
		wg   sync.WaitGroup
	)
	logf := func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, fmt.Sprintf(f, a...))
	}
	paths := make([]string, 3)
	errs := make([]error, 3)
	for i := range paths {
		wg.Go(func() { paths[i], errs[i] = EnsureTemporalCLI(context.Background(), logf) })
	}
	wg.Wait()
	want, _ := TemporalCLIPath()
	for i := range paths {
		if errs[i] != nil || paths[i] != want {
			t.Fatalf("caller %d: path %q err %v; want %q", i, paths[i], errs[i], want)
		}
	}
	if b, _ := os.ReadFile(count); strings.Count(string(b), "run") != 1 {
		t.Errorf("go install ran %d times, want 1", strings.Count(string(b), "run"))
	}
	all := strings.Join(logs, "\n")
	for _, w := range []string{"building temporal CLI", "still building", "waiting for another process"} {
		if !strings.Contains(all, w) {
			t.Errorf("no %q progress message in:\n%s", w, all)
		}
	}
	// Cached now: no build, no messages.
	logs = nil
	if _, err := EnsureTemporalCLI(context.Background(), logf); err != nil || len(logs) != 0 {
		t.Errorf("cached call: err %v, logs %q", err, logs)
	}
	// No leftovers from the temp GOBIN.
	entries, _ := os.ReadDir(filepath.Dir(want))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".build-") {
			t.Errorf("leftover %s", e.Name())
		}
	}
}

func TestEnsureTemporalCLIBuildFailure(t *testing.T) {
	fakeGo(t, "echo 'cannot reach the module proxy' >&2\nexit 1\n")
	_, err := EnsureTemporalCLI(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the module proxy") {
		t.Fatalf("err = %v; want the build output tail in it", err)
	}
	if p, _ := TemporalCLIPath(); temporalCheckExec(p) == nil {
		t.Error("failed build left a binary in the cache")
	}
}

func TestEnsureTemporalCLIEnvOverride(t *testing.T) {
	fakeGo(t, "exit 1\n")
	t.Setenv(EnvTemporalCLI, filepath.Join(t.TempDir(), "missing"))
	if _, err := EnsureTemporalCLI(context.Background(), nil); err == nil || !strings.Contains(err.Error(), EnvTemporalCLI) {
		t.Fatalf("err = %v; want it to name %s", err, EnvTemporalCLI)
	}
	exe := filepath.Join(t.TempDir(), "temporal")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvTemporalCLI, exe)
	if p, err := EnsureTemporalCLI(context.Background(), nil); err != nil || p != exe {
		t.Fatalf("got %q, %v; want %q", p, err, exe)
	}
}

func TestEnsureTemporalCLICancel(t *testing.T) {
	fakeGo(t, "sleep 30\n")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := EnsureTemporalCLI(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("err = %v; want the context's error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v; the build's process group was not interrupted", d)
	}
}
