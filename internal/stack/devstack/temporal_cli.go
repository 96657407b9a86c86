package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// TemporalCLIVersion is the temporal CLI release the dev stack and the tests
// run. It pins the embedded Temporal server version too (v1.5.1 embeds server
// 1.29.1), so bump it deliberately and re-run the integration tests.
const TemporalCLIVersion = "v1.5.1"

// temporalCLIPackage is the main package built by EnsureTemporalCLI.
const temporalCLIPackage = "github.com/temporalio/cli/cmd/temporal"

// EnvTemporalCLI names the environment variable that points at an existing
// temporal binary, skipping the pinned build (e.g. a system-wide install, or
// a CI image that ships one).
const EnvTemporalCLI = "ATELIER_TEMPORAL_CLI"

// EnvCacheDir overrides the directory where built tools are cached
// (default: the user cache dir + "/atelier", i.e. ~/.cache/atelier on Linux).
const EnvCacheDir = "ATELIER_CACHE_DIR"

// temporalProgressEvery is how often a long build (or a wait for someone else's
// build) reports that it is still alive; a silent 10-minute step looks hung.
var temporalProgressEvery = 30 * time.Second

// CacheDir returns the directory under which Atelier caches tools it builds
// (ATELIER_CACHE_DIR, else ~/.cache/atelier or the OS equivalent).
func CacheDir() (string, error) {
	if d := os.Getenv(EnvCacheDir); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("devstack: no cache dir (set %s): %w", EnvCacheDir, err)
	}
	return filepath.Join(base, "atelier"), nil
}

// temporalCLI is the pinned temporal CLI as a goTool.
var temporalCLI = goTool{
	name:    "temporal CLI",
	exe:     "temporal",
	dir:     "temporal-" + TemporalCLIVersion,
	pkg:     temporalCLIPackage,
	version: TemporalCLIVersion,
	// Stamp the version like upstream release builds do, so `temporal
	// --version` tells which pinned CLI is running.
	ldflags:  "-X github.com/temporalio/cli/temporalcli.Version=" + strings.TrimPrefix(TemporalCLIVersion, "v"),
	estimate: "~10 min on 2 cores",
	env:      EnvTemporalCLI,
}

// TemporalCLIPath returns where the pinned temporal CLI lives (or will live
// once built), without building it.
func TemporalCLIPath() (string, error) { return temporalCLI.path() }

// EnsureTemporalCLI returns the path of a temporal CLI binary, building the
// pinned TemporalCLIVersion on first use.
//
// Order: $ATELIER_TEMPORAL_CLI if set (must exist); else the cached build in
// <CacheDir>/temporal-<version>/temporal; else `go install` it there (see
// goTool.ensure: temp GOBIN renamed into place, a lock file serialising
// concurrent callers, progress every 30 s). log receives progress messages
// (may be nil).
func EnsureTemporalCLI(ctx context.Context, log func(string, ...any)) (string, error) {
	return temporalCLI.ensure(ctx, log)
}

// errNoGo says that no go command was found; goTool.build names the tool.
var errNoGo = errors.New("the go command is not on PATH, in $GOROOT/bin or /usr/local/go/bin")

// temporalFindGo locates the go command: PATH first, then $GOROOT and the standard
// install location, because CI shells on a fresh machine may not have Go on
// PATH even though it is installed.
func temporalFindGo() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	var candidates []string
	if r := os.Getenv("GOROOT"); r != "" {
		candidates = append(candidates, filepath.Join(r, "bin", temporalExeName("go")))
	}
	candidates = append(candidates, "/usr/local/go/bin/go")
	for _, c := range candidates {
		if temporalCheckExec(c) == nil {
			return c, nil
		}
	}
	return "", errNoGo
}

func temporalCheckExec(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return errors.New("is a directory")
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o111 == 0 {
		return errors.New("not executable")
	}
	return nil
}

func temporalExeName(name string) string {
	if runtime.GOOS == "windows" {
		return name + ".exe"
	}
	return name
}

func temporalLogOrNop(log func(string, ...any)) func(string, ...any) {
	if log == nil {
		return func(string, ...any) {}
	}
	return log
}

// temporalRoundDur rounds a duration for progress messages: to the second
// under a minute, then to the half minute (progress comes every 30 s, so
// whole minutes would repeat each value twice).
func temporalRoundDur(d time.Duration) time.Duration {
	if d >= time.Minute {
		return d.Round(30 * time.Second)
	}
	return d.Round(time.Second)
}

// temporalTail keeps the last max bytes written to it, so error messages can
// quote the end of a long build or server log without holding all of it.
type temporalTail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func newTemporalTail(max int) *temporalTail {
	return &temporalTail{max: max}
}

func (t *temporalTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns the retained tail, starting at a line boundary when possible.
func (t *temporalTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) == t.max {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// temporalLastLines returns at most n trailing lines of s.
func temporalLastLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
