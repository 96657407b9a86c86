package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/atelier-ml/atelier/runstate"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	sdklog "go.temporal.io/sdk/log"
)

// DefaultNamespace is the Temporal namespace Atelier uses when none is given.
const DefaultNamespace = "atelier"

// DynamicConfigValue is one `--dynamic-config-value KEY=VALUE` passed to the
// dev server. Value is JSON, as the CLI expects.
type DynamicConfigValue struct {
	Key   string
	Value string
}

// TunedDynamicConfig is the dynamic config the dev stack AND the tests run
// the Temporal dev server with. It is the single source of truth; the
// documented copy for production operators is
// deploy/dev/temporal-dynamic-config.yaml (keep the two in sync).
//
// Why: with defaults, every hop through a history task queue waits for that
// queue's rate-limited poll (20 polls/s), and timers shorter than
// timerProcessorMaxTimeShift (1s) are pushed out to 1s. Measured with server
// 1.29.1 on a 2-core machine, one setting group added per row (medians of a
// one-off sweep; TestActivityLatency and TestTimerLatency in
// internal/stack/temporaltest guard the end result):
//
//	                                 activity   1-activity   Sleep(10ms)  retry after
//	                                 round trip workflow                  10ms backoff
//	defaults                         100 ms     150 ms       1004 ms      1035 ms
//	+ transferProcessorMaxPoll*RPS     8 ms      19 ms       1004 ms      1025 ms
//	+ enableActivityEagerExecution     6 ms      15 ms       1004 ms      1023 ms
//	+ timerProcessor* (3 values)       6 ms      14 ms         17 ms        32 ms
//
// The timer settings cost ~3.5% of one core while idle (0.3% without);
// cheap for a dev box, and they make retry/backoff tests run in
// milliseconds. Also measured and NOT adopted (no gain or worse):
// matching.numTaskqueue{Read,Write}Partitions=1,
// system.enableEagerWorkflowStart=true.
//
// Which values matter for production clusters:
//   - history.transferProcessorMaxPollRPS / MaxPollHostRPS: the same ~50 ms
//     per-hop floor exists on an idle or lightly loaded real cluster (a busy
//     one polls continuously and never notices). Raising them costs extra
//     persistence reads per shard while idle: size them against the
//     database (hundreds, not 10000, on a cluster with thousands of shards).
//   - system.enableActivityEagerExecution: recommended in production. A
//     worker completing a workflow task gets the activities it scheduled on
//     its own task queue back in the response, skipping matching.
//   - history.timerProcessorMaxPollRPS / MaxPollHostRPS: as the transfer
//     ones, for timer, retry-backoff and timeout precision.
//   - history.timerProcessorMaxTimeShift: DEV ONLY. It is the safety margin
//     for clock skew between history hosts; keep the default (1s) on any
//     multi-host cluster and accept sub-second timers rounding up to ~1s.
//   - frontend.enableServerVersionCheck=false only stops the dev server from
//     phoning home (there is no network in CI); irrelevant in production.
var TunedDynamicConfig = []DynamicConfigValue{
	{"history.transferProcessorMaxPollRPS", "10000"},
	{"history.transferProcessorMaxPollHostRPS", "10000"},
	{"system.enableActivityEagerExecution", "true"},
	{"history.timerProcessorMaxPollRPS", "10000"},
	{"history.timerProcessorMaxPollHostRPS", "10000"},
	{"history.timerProcessorMaxTimeShift", `"10ms"`},
	{"frontend.enableServerVersionCheck", "false"},
}

// TemporalSearchAttributes are the custom search attributes Atelier registers on its
// namespace (all Keyword), so that runs can be found in the Temporal UI and
// with `temporal workflow list --query` by project, pipeline, state, the
// token that started them and the schedule that did (docs/operations.md
// has the commands for a production cluster).
var TemporalSearchAttributes = map[string]enumspb.IndexedValueType{
	runstate.SAProject:   enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	runstate.SAPipeline:  enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	runstate.SAState:     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	runstate.SACreatedBy: enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	runstate.SASchedule:  enumspb.INDEXED_VALUE_TYPE_KEYWORD,
}

// TemporalOptions configures StartTemporal.
type TemporalOptions struct {
	// StateDir keeps the server's SQLite database (<StateDir>/temporal.db)
	// so workflows survive restarts. Empty means in-memory (tests).
	StateDir string
	// Host is the IP the frontend (and UI) bind to; default 127.0.0.1.
	Host string
	// Port is the frontend gRPC port; 0 picks a free port.
	Port int
	// UIPort is the Web UI port (ignored when Headless); 0 picks a free port.
	UIPort int
	// Namespace to create; default DefaultNamespace ("default" always exists).
	Namespace string
	// Headless disables the Web UI (tests don't need it; it costs memory).
	Headless bool
	// LogFile receives the server's stdout/stderr (appended). Empty keeps
	// only an in-memory tail, used in startup error messages.
	LogFile string
	// LogLevel is the server log level (debug, info, warn, error, never);
	// default "warn", as the CLI itself defaults for start-dev.
	LogLevel string
	// ExtraArgs are appended to `temporal server start-dev`, e.g. extra
	// --dynamic-config-value flags for experiments (later values win).
	ExtraArgs []string
	// StartTimeout bounds waiting for the server to answer; default 2m
	// (generous because parallel test binaries share two cores).
	StartTimeout time.Duration
}

// TemporalServer is a running `temporal server start-dev` process.
type TemporalServer struct {
	cmd       *exec.Cmd
	hostPort  string
	uiURL     string
	namespace string
	logTail   *temporalTail
	logFile   *os.File

	exited  chan struct{} // closed when the process has exited
	waitErr error         // valid after exited is closed

	stopOnce sync.Once
	stopErr  error
}

// StartTemporal starts a Temporal dev server with TunedDynamicConfig, the
// namespace and TemporalSearchAttributes, and returns once the frontend
// answers health checks, the namespace is describable and the search
// attributes exist. ctx bounds only the startup (including a first-time CLI
// build); the server runs until Stop. log receives progress messages (may
// be nil). On failure the error carries the tail of the server's log.
func StartTemporal(ctx context.Context, opts TemporalOptions, log func(string, ...any)) (*TemporalServer, error) {
	log = temporalLogOrNop(log)
	bin, err := EnsureTemporalCLI(ctx, log)
	if err != nil {
		return nil, err
	}
	host := opts.Host
	if host == "" || host == "localhost" {
		// The server wants an IP, and "localhost" may resolve to ::1 first.
		host = "127.0.0.1"
	}
	ns := opts.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	port := opts.Port
	if port == 0 {
		if port, err = freePort(host); err != nil {
			return nil, err
		}
	}
	args := []string{"server", "start-dev", "--ip", host, "--port", strconv.Itoa(port), "--namespace", ns}
	uiURL := ""
	if opts.Headless {
		args = append(args, "--headless")
	} else {
		uiPort := opts.UIPort
		if uiPort == 0 {
			if uiPort, err = freePort(host); err != nil {
				return nil, err
			}
		}
		args = append(args, "--ui-port", strconv.Itoa(uiPort))
		uiURL = "http://" + net.JoinHostPort(host, strconv.Itoa(uiPort))
	}
	if opts.StateDir != "" {
		if err := os.MkdirAll(opts.StateDir, 0o755); err != nil {
			return nil, fmt.Errorf("devstack: temporal state dir: %w", err)
		}
		args = append(args, "--db-filename", filepath.Join(opts.StateDir, "temporal.db"))
	}
	level := opts.LogLevel
	if level == "" {
		level = "warn"
	}
	args = append(args, "--log-level", level)
	for _, dc := range TunedDynamicConfig {
		args = append(args, "--dynamic-config-value", dc.Key+"="+dc.Value)
	}
	for _, name := range temporalSortedKeys(TemporalSearchAttributes) {
		args = append(args, "--search-attribute", name+"="+temporalSATypeName(TemporalSearchAttributes[name]))
	}
	args = append(args, opts.ExtraArgs...)

	s := &TemporalServer{
		hostPort:  net.JoinHostPort(host, strconv.Itoa(port)),
		uiURL:     uiURL,
		namespace: ns,
		logTail:   newTemporalTail(32 << 10),
		exited:    make(chan struct{}),
	}
	var out io.Writer = s.logTail
	if opts.LogFile != "" {
		if err := os.MkdirAll(filepath.Dir(opts.LogFile), 0o755); err != nil {
			return nil, fmt.Errorf("devstack: temporal log dir: %w", err)
		}
		f, err := os.OpenFile(opts.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("devstack: temporal log file: %w", err)
		}
		fmt.Fprintf(f, "--- %s starting %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
		s.logFile = f
		out = io.MultiWriter(f, s.logTail)
	}

	// Not CommandContext: ctx bounds startup only; the server lives until Stop.
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout = out
	s.cmd.Stderr = out
	temporalProcAttrs(s.cmd)
	start := time.Now()
	log("starting temporal dev server on %s (namespace %s)…", s.hostPort, ns)
	// Linux delivers the parent-death signal (temporalParentDeathSignal)
	// when the OS thread that forked the server exits, and the Go runtime
	// retires a thread when a goroutine locked to it exits: any harness
	// that starts its own children that way (s3test, kubetest) could run
	// on the thread that forked this server and take the server down with
	// it (seen in CI: "temporal dev server had exited: signal: killed").
	// So the server is forked by a goroutine that stays locked to its
	// thread until the server has exited: no other goroutine runs there.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := s.cmd.Start(); err != nil {
			started <- err
			runtime.UnlockOSThread()
			return
		}
		started <- nil
		s.waitErr = s.cmd.Wait()
		runtime.UnlockOSThread()
		s.closeLog()
		close(s.exited)
	}()
	if err := <-started; err != nil {
		s.closeLog()
		return nil, fmt.Errorf("devstack: start temporal: %w", err)
	}

	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	readyCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.waitReady(readyCtx); err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("devstack: temporal dev server on %s did not become ready: %w\n--- server log tail ---\n%s",
			s.hostPort, err, temporalLastLines(s.logTail.String(), 40))
	}
	if opts.StateDir != "" {
		// Every tenant's workflow history is in this file: owner-only, so
		// a step cannot read it. (The server decides whether to create its
		// schema by whether the file exists, so it cannot be made before;
		// SQLite gives -wal and -shm files it creates later the database's
		// mode.)
		if err := makePrivate(filepath.Join(opts.StateDir, "temporal.db")); err != nil {
			_ = s.Stop()
			return nil, fmt.Errorf("devstack: temporal db: %w", err)
		}
	}
	log("temporal dev server ready on %s in %s (UI %s)", s.hostPort, time.Since(start).Round(time.Millisecond), temporalOrDisabled(uiURL))
	return s, nil
}

// waitReady polls until the frontend is healthy, the namespace exists and
// the search attributes are registered, or the process exits, or ctx ends.
func (s *TemporalServer) waitReady(ctx context.Context) error {
	// Abort an in-flight dial as soon as the process dies: something else
	// may be listening on the port and never answer gRPC.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	var lastErr error
	for {
		select {
		case <-s.exited:
			return fmt.Errorf("server exited during startup: %v", s.waitErr)
		default:
		}
		if lastErr = s.tryReady(ctx); lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			select {
			case <-s.exited: // our own cancel: report the real cause
				return fmt.Errorf("server exited during startup: %v", s.waitErr)
			default:
			}
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *TemporalServer) tryReady(ctx context.Context) error {
	attemptCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := client.DialContext(attemptCtx, s.ClientOptions())
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.CheckHealth(attemptCtx, &client.CheckHealthRequest{}); err != nil {
		return err
	}
	if _, err := c.WorkflowService().DescribeNamespace(attemptCtx,
		&workflowservice.DescribeNamespaceRequest{Namespace: s.namespace}); err != nil {
		return fmt.Errorf("describe namespace %q: %w", s.namespace, err)
	}
	return ensureTemporalSearchAttributes(attemptCtx, c, s.namespace)
}

// ensureTemporalSearchAttributes registers any missing TemporalSearchAttributes via the
// operator service. The --search-attribute flag only applies when the CLI
// creates the namespace, so an existing --db-filename from an older Atelier
// would otherwise miss attributes added since. Idempotent.
func ensureTemporalSearchAttributes(ctx context.Context, c client.Client, ns string) error {
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return fmt.Errorf("list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range TemporalSearchAttributes {
		have, ok := list.GetCustomAttributes()[name]
		if !ok {
			missing[name] = typ
		} else if have != typ {
			return fmt.Errorf("search attribute %s exists with type %s, want %s (delete the dev database to reset)", name, have, typ)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: ns, SearchAttributes: missing,
	})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("add search attributes: %w", err)
	}
	return nil
}

// HostPort is the frontend gRPC address, for client.Options.HostPort.
func (s *TemporalServer) HostPort() string { return s.hostPort }

// Pid is the server process's ID (benchmarks read its CPU time).
func (s *TemporalServer) Pid() int { return s.cmd.Process.Pid }

// UIURL is the Web UI base URL, or "" when started headless.
func (s *TemporalServer) UIURL() string { return s.uiURL }

// Namespace is the namespace created for Atelier.
func (s *TemporalServer) Namespace() string { return s.namespace }

// ClientOptions returns options for dialing this server's namespace, with
// the SDK's logging silenced (callers that want it set Logger).
func (s *TemporalServer) ClientOptions() client.Options {
	return client.Options{
		HostPort:  s.hostPort,
		Namespace: s.namespace,
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	}
}

// Exited is closed when the server process has exited (crash or Stop), so a
// long-running dev command can notice a dead server.
func (s *TemporalServer) Exited() <-chan struct{} { return s.exited }

// LogTail returns the last lines of the server's output, for diagnostics.
func (s *TemporalServer) LogTail() string { return s.logTail.String() }

// Stop shuts the server down: SIGINT to its process group, then SIGKILL
// after 10s, and waits for it to exit. Safe to call more than once. It
// returns an error only if the server had to be killed or had already died
// with an error before Stop.
func (s *TemporalServer) Stop() error {
	s.stopOnce.Do(func() {
		select {
		case <-s.exited:
			// Died on its own: report that, it is news to the caller.
			if s.waitErr != nil {
				s.stopErr = fmt.Errorf("devstack: temporal dev server had exited: %w", s.waitErr)
			}
			return
		default:
		}
		_ = temporalInterrupt(s.cmd.Process)
		select {
		case <-s.exited:
			return // exit status after SIGINT is not interesting
		case <-time.After(10 * time.Second):
		}
		_ = temporalKill(s.cmd.Process)
		<-s.exited
		s.stopErr = errors.New("devstack: temporal dev server did not stop within 10s of SIGINT; killed")
	})
	return s.stopErr
}

func (s *TemporalServer) closeLog() {
	if s.logFile != nil {
		_ = s.logFile.Close()
	}
}

// freePort returns a port that is free on host. Like the temporal CLI and SDK
// do, it connects to the port once so the kernel keeps it in TIME_WAIT and
// does not hand it to the next bind(:0) (e.g. the CLI's own metrics and
// internal service ports) before the server binds it explicitly.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("devstack: find free port: %w", err)
	}
	defer l.Close()
	addr := l.Addr().(*net.TCPAddr)
	if runtime.GOOS != "darwin" && runtime.GOOS != "windows" {
		conn, err := net.DialTCP("tcp", nil, addr)
		if err != nil {
			return 0, fmt.Errorf("devstack: find free port: %w", err)
		}
		srv, err := l.Accept()
		if err != nil {
			conn.Close()
			return 0, fmt.Errorf("devstack: find free port: %w", err)
		}
		// Server side closes first, so the TIME_WAIT is on the listening port.
		srv.Close()
		conn.Close()
	}
	return addr.Port, nil
}

// temporalSATypeName turns INDEXED_VALUE_TYPE_KEYWORD into "Keyword", the form
// the CLI's --search-attribute flag takes.
func temporalSATypeName(t enumspb.IndexedValueType) string {
	for name, v := range enumspb.IndexedValueType_shorthandValue {
		if enumspb.IndexedValueType(v) == t {
			return name
		}
	}
	return t.String()
}

func temporalSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func temporalOrDisabled(s string) string {
	if s == "" {
		return "disabled"
	}
	return s
}

// makePrivate makes an SQLite database and its -wal and -shm files 0600.
func makePrivate(db string) error {
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
