package temporaltest

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/atelier-ml/atelier/internal/stack/devstack"
)

var (
	once     sync.Once
	server   *devstack.TemporalServer
	stateDir string
	initErr  error
	seq      atomic.Int64
)

// Main runs the tests and then stops the shared server, if one was started.
// Call it from TestMain; it does not return.
func Main(m *testing.M) {
	code := m.Run()
	if server != nil {
		if err := server.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "temporaltest:", err)
		}
	}
	if stateDir != "" {
		_ = os.RemoveAll(stateDir)
	}
	os.Exit(code)
}

// Server returns the test binary's shared Temporal dev server, starting it
// on first use (its database in a temporary file, headless, free port, TunedDynamicConfig, the
// Atelier namespace and search attributes). A failed start fails every test
// that asks, with the server's log tail in the message.
func Server(t testing.TB) *devstack.TemporalServer {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Temporal dev server; skipped with -short")
	}
	once.Do(func() {
		// Generous: on a fresh machine this includes building the temporal
		// CLI (~10 min on 2 cores); `make test` builds it first anyway.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		logf := func(format string, args ...any) {
			// Progress goes to stderr directly: t.Logf output is held back
			// until the test ends, and a silent build looks like a hang.
			fmt.Fprintf(os.Stderr, "temporaltest: "+format+"\n", args...)
		}
		// A database file rather than the dev server's in-memory SQLite:
		// an in-memory database vanishes whenever the server's pool has
		// closed its last connection, and a long test run then loses the
		// namespace ("Namespace atelier is not found" mid-run; the same as
		// temporalio/temporal#3784, #8017). In RAM where the machine has
		// /dev/shm, so commits cost no disk flush.
		if stateDir, initErr = os.MkdirTemp(shmOrTemp(), "atelier-temporaltest-"); initErr != nil {
			return
		}
		server, initErr = devstack.StartTemporal(ctx, devstack.TemporalOptions{
			StateDir: stateDir,
			Headless: true,
			LogFile:  os.Getenv("ATELIER_TEMPORAL_TEST_LOG"),
		}, logf)
	})
	if initErr != nil {
		t.Fatalf("temporaltest: %v", initErr)
	}
	return server
}

// Client returns a client for the shared server's namespace, closed when
// the test ends.
func Client(t testing.TB) client.Client {
	t.Helper()
	s := Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, s.ClientOptions())
	if err != nil {
		t.Fatalf("temporaltest: dial %s: %v", s.HostPort(), err)
	}
	t.Cleanup(c.Close)
	return c
}

// shmOrTemp is /dev/shm when it is a writable directory, else the
// system's temporary directory.
func shmOrTemp() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if f, err := os.CreateTemp("/dev/shm", "atelier-probe-"); err == nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
			return "/dev/shm"
		}
	}
	return os.TempDir()
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// TaskQueue returns a task queue name unique to this test (and this run of
// it), so workers of concurrently running tests never steal each other's
// tasks on the shared server.
func TaskQueue(t testing.TB) string {
	name := unsafeChars.ReplaceAllString(t.Name(), "_")
	return fmt.Sprintf("test-%s-%d-%d", strings.Trim(name, "_"), os.Getpid(), seq.Add(1))
}
