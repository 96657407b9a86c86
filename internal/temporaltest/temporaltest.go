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

	"github.com/atelier-ml/atelier/internal/devstack"
)

var (
	once    sync.Once
	server  *devstack.TemporalServer
	initErr error
	seq     atomic.Int64
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
	os.Exit(code)
}

// Server returns the test binary's shared Temporal dev server, starting it
// on first use (in-memory, headless, free port, TunedDynamicConfig, the
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
		server, initErr = devstack.StartTemporal(ctx, devstack.TemporalOptions{
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

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// TaskQueue returns a task queue name unique to this test (and this run of
// it), so workers of concurrently running tests never steal each other's
// tasks on the shared server.
func TaskQueue(t testing.TB) string {
	name := unsafeChars.ReplaceAllString(t.Name(), "_")
	return fmt.Sprintf("test-%s-%d-%d", strings.Trim(name, "_"), os.Getpid(), seq.Add(1))
}
