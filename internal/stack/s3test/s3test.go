package s3test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/internal/stack/devstack"
)

// Server is a running versitygw with one bucket.
type Server struct {
	// Endpoint is the server's base URL, http://127.0.0.1:<port>.
	Endpoint string
	// Region is the region the server answers for; requests are signed for
	// it.
	Region string
	// AccessKey and SecretKey are the credentials of the server's root
	// account, the only one.
	AccessKey, SecretKey string
	// Bucket is the bucket Start (or Run) created.
	Bucket string
	// Dir is the posix backend's root: each directory in it is a bucket,
	// and the object a/b of bucket B is the file Dir/B/a/b.
	Dir string
	// Log is the file the server's output goes to (outside Dir).
	Log string
	// PID is the server's process ID (a benchmark reads its CPU time).
	PID int
}

// Option changes what Start and Run set up.
type Option func(*Server)

// WithBucket names the bucket Start creates (default "atelier-test"). It
// must be a valid S3 bucket name: Start makes any directory, but versitygw
// then answers every request for an invalid one with InvalidBucketName.
func WithBucket(name string) Option { return func(s *Server) { s.Bucket = name } }

// WithRegion sets the server's region (default "us-east-1"). Clients must
// sign for the same one: versitygw refuses any other
// (AuthorizationHeaderMalformed).
func WithRegion(region string) Option { return func(s *Server) { s.Region = region } }

// Start starts a versitygw for this test, with its bucket created, and
// stops it when the test ends; on a failed test the server's output is
// written to the test log. It skips the test with -short.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a versitygw S3 server; skipped with -short")
	}
	// Generous: on a fresh machine this includes building versitygw (a few
	// minutes on 2 cores); `make test` builds it first anyway.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir := t.TempDir()
	s, stop, err := Run(ctx, dir, opts...)
	if err != nil {
		if log := filepath.Join(dir, logName); fileExists(log) {
			logTail(t, log) // it started, then failed
		}
		t.Fatalf("s3test: %v", err)
	}
	// Registered after t.TempDir's cleanup, so run before it: the server
	// has exited when its directory is removed.
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			logTail(t, s.Log)
		}
	})
	return s
}

// Run starts a versitygw outside a test (a benchmark, a tool): its bucket
// is created, its data is kept under dir/s3 (Server.Dir) and its output
// goes to dir/versitygw.log (Server.Log); dir is created if missing and
// should be empty. ctx bounds the build of versitygw (on first use) and the start,
// not the server's life: stop kills it and waits for its exit (it is
// idempotent); dir is left to the caller. On Linux the server is also
// killed when this process dies. On error nothing is left running.
func Run(ctx context.Context, dir string, opts ...Option) (s *Server, stop func(), err error) {
	bin, err := devstack.EnsureVersityGW(ctx, func(format string, args ...any) {
		// Progress goes to stderr directly: t.Logf output is held back
		// until the test ends, and a silent build looks like a hang.
		fmt.Fprintf(os.Stderr, "s3test: "+format+"\n", args...)
	})
	if err != nil {
		return nil, nil, err
	}

	s = &Server{
		Region:    "us-east-1",
		AccessKey: "atelier-test-access",
		SecretKey: "atelier-test-secret",
		Bucket:    "atelier-test",
		Dir:       filepath.Join(dir, "s3"),
		// The log lives outside Dir, which belongs to the backend.
		Log: filepath.Join(dir, logName),
	}
	for _, o := range opts {
		o(s)
	}
	// The posix backend's bucket is a directory of the root: creating it
	// here is what CreateBucket does, minus the ACL and ownership
	// attributes, which the root account (the only one here) does not
	// need. Tested: objects, listing and presigned URLs all work.
	if err := os.MkdirAll(filepath.Join(s.Dir, s.Bucket), 0o755); err != nil {
		return nil, nil, fmt.Errorf("create bucket: %w", err)
	}

	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.Endpoint = "http://" + addr
	logF, err := os.Create(s.Log)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin,
		"--access", s.AccessKey, "--secret", s.SecretKey,
		"--region", s.Region,
		"--port", addr,
		// An unauthenticated GET that answers once the gateway serves.
		"--health", "/health",
		// No line per request on stdout; errors still go to stderr.
		"--quiet",
		"posix", s.Dir)
	// versitygw also reads its settings from the environment (VGW_*,
	// ROOT_ACCESS_KEY, ...): a developer's shell must not change the test
	// server.
	cmd.Env = []string{}
	cmd.Stdout, cmd.Stderr = logF, logF
	done, err := start(cmd)
	logF.Close() // the child has its own copy
	if err != nil {
		return nil, nil, fmt.Errorf("start versitygw: %w", err)
	}
	s.PID = cmd.Process.Pid
	var once sync.Once
	stop = func() {
		once.Do(func() {
			// Killed, not asked: the data is thrown away with the
			// directory anyway.
			_ = cmd.Process.Kill()
			<-done
		})
	}

	if err := waitHealthy(ctx, s.Endpoint+"/health", done); err != nil {
		stop()
		return nil, nil, fmt.Errorf("versitygw on %s: %w (its output: %s)", addr, err, s.Log)
	}
	return s, stop, nil
}

// URL is a gocloud.dev/blob URL for the bucket through the s3blob driver
// (import it, blank, where the URL is opened); with a prefix, every key is
// under it (blob.PrefixedBucket). Credentials come from the environment:
// see Env and Setenv.
//
// endpoint carries the http:// scheme, so no disable_https is needed;
// use_path_style because virtual-host addressing would ask for
// <bucket>.127.0.0.1; region because requests are signed for it.
func (s *Server) URL(prefix string) string {
	q := url.Values{
		"endpoint":       {s.Endpoint},
		"region":         {s.Region},
		"use_path_style": {"true"},
	}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	return "s3://" + s.Bucket + "?" + q.Encode()
}

// Env is the environment that gives an AWS SDK (and so the s3blob URL
// opener) in a child process the server's credentials and region.
func (s *Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_REGION=" + s.Region,
	}
}

// Setenv sets Env in this process for the rest of the test (t.Setenv), for
// a bucket opened in the test itself.
func (s *Server) Setenv(t testing.TB) {
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// start starts cmd with a parent-death signal, so a test binary killed by
// -timeout takes the server with it. That signal is tied to the OS thread
// that forked the child, and the Go runtime retires a thread when a
// goroutine locked to it exits: so the child is started from a goroutine
// that locks its thread and waits for the child on it. done is closed when
// the child has exited.
func start(cmd *exec.Cmd) (done <-chan struct{}, err error) {
	parentDeathSignal(cmd)
	exited := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(exited)
	}()
	return exited, <-started
}

// waitHealthy polls the health URL until it answers 200, the server exits
// or ctx ends.
func waitHealthy(ctx context.Context, health string, exited <-chan struct{}) error {
	return waitHTTP(ctx, health, exited, func(status int) bool { return status == http.StatusOK })
}

// waitHTTP polls u until an answer's status satisfies ok, the server
// exits or ctx ends (at most 30 s).
func waitHTTP(ctx context.Context, u string, exited <-chan struct{}, ok func(status int) bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if ok(resp.StatusCode) {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("exited during startup")
		case <-ctx.Done():
			return fmt.Errorf("not healthy: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freePort returns a loopback port that was free a moment ago. Another
// process could take it before versitygw binds it; on a test machine that
// is rare enough not to be worth retrying.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logName is the server's output file in Run's directory.
const logName = "versitygw.log"

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// logTail writes the end of the server's output to the test log.
func logTail(t testing.TB, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Logf("s3test: server log: %v", err)
		return
	}
	const max = 16 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	t.Logf("s3test: server output (%s):\n%s", path, b)
}
