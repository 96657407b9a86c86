package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/activities/local/supervisor"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/examples/gopipeline"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/secretbox"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/internal/process/app"
	"github.com/atelier-ml/atelier/internal/process/config"
	"github.com/atelier-ml/atelier/internal/stack/devstack"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
	"github.com/atelier-ml/atelier/internal/stack/temporaltest"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/internal/store/storetest"
	"github.com/atelier-ml/atelier/wire"
)

func TestMain(m *testing.M) { temporaltest.Main(m) }

// stack is one isolated Atelier: its own database and task queue on the
// shared Temporal dev server, a gateway on a free port and (optionally) an
// in-process worker.
type stack struct {
	t        *testing.T
	cfg      config.Config
	url      string
	port     string // the gateway's
	token    string
	store    *store.Store
	temporal client.Client
	project  string
	// metrics is the registry the in-process gateway and worker share.
	metrics *telemetry.Metrics
}

type stackOptions struct {
	noWorker bool
	// register adds workflows/activities to the in-process worker.
	register func(worker.Registry)
	// dbURL rewrites the database URL the gateway and worker use (the
	// test's own store keeps the direct one).
	dbURL func(string) string
	// concurrency overrides the worker's step slots.
	concurrency int
	// podScript, for a kubeEnv, decides each step pod's exit from the pod
	// (its labels: run, step, item) rather than from its kind alone.
	podScript func(kubetest.PodRef) kubetest.Exit
	// sparkScript, for a kubeEnv, decides each SparkApplication's
	// scenario from the object (the simulated Spark operator's script)
	// rather than from its kind alone.
	sparkScript func(kubetest.ObjectRef) kubetest.Scenario
	// streamLimit overrides the gateway's open streams per token.
	streamLimit int
	// gpuMinRuntime overrides how long a GPU step runs before it may be
	// preempted.
	gpuMinRuntime time.Duration
	// podDefaults is a kubeEnv's cluster pod defaults (YAML, the
	// worker's --pod-defaults file).
	podDefaults string
	// kueueQueue makes a kubeEnv's cluster worker submit to Kueue.
	kueueQueue string
	// localEngines is the worker's --local-engine.
	localEngines map[string]string
	// spanExporter turns tracing on in the gateway and the worker and
	// receives their spans.
	spanExporter sdktrace.SpanExporter
	// artifactsURL is the artifact store of gateway and workers (default:
	// a directory store of the test's own, as `atelier dev` has).
	artifactsURL string
	// stagingURL and stagingURI are a kubeEnv's cluster worker's staging
	// store of ray steps' artifacts (--artifacts-staging-url, -uri).
	stagingURL, stagingURI string
	// artifactLimit caps each project's artifact bytes.
	artifactLimit int64
	// artifactsImport is the worker's --artifacts-import.
	artifactsImport string
	// listenAddr is the gateway's address (default 127.0.0.1:0); a
	// kubeEnv whose real node's pods reach the gateway (the step
	// launcher) listens on every address.
	listenAddr string
	// temporal replaces the test binary's shared Temporal server (a test
	// that kills it needs its own).
	temporal *devstack.TemporalServer
	// noSecretsKey starts the gateway (and worker) without a secrets key:
	// the secrets routes answer 503.
	noSecretsKey bool
}

var supervisorOnce sync.Once

func newStack(t *testing.T, opts ...stackOptions) *stack {
	t.Helper()
	var o stackOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	// Supervisors of local steps from a plain build of the atelier command:
	// this race-instrumented test binary takes over a second to start as one.
	supervisorOnce.Do(func() { _ = os.Setenv(supervisor.BinaryEnv, atelierBinary(t)) })
	ts := o.temporal
	if ts == nil {
		ts = temporaltest.Server(t)
	}
	cfg := config.Default()
	cfg.DatabaseURL = storetest.NewDatabase(t)
	direct := cfg.DatabaseURL
	if o.dbURL != nil {
		cfg.DatabaseURL = o.dbURL(direct)
	}
	cfg.TemporalHostPort = ts.HostPort()
	cfg.Namespace = ts.Namespace()
	cfg.TaskQueue = temporaltest.TaskQueue(t)
	cfg.ListenAddr = "127.0.0.1:0"
	if o.listenAddr != "" {
		cfg.ListenAddr = o.listenAddr
	}
	cfg.DataDir = stepDataDir(t)
	cfg.LogLevel = "warn"
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Examples = true // like the dev stack
	// Webhook receivers are httptest servers on loopback (as in the dev
	// stack); retries quick enough for a test.
	cfg.WebhookAllowPrivate = true
	cfg.WebhookBackoff = 200 * time.Millisecond
	// A key per stack for project secrets, as `atelier dev` makes one.
	if !o.noSecretsKey {
		key, err := secretbox.NewLocalKeyURL()
		require.NoError(t, err)
		cfg.SecretsKeyURL = key
	}
	if o.concurrency > 0 {
		cfg.WorkerConcurrency = o.concurrency
	}
	if o.streamLimit > 0 {
		cfg.StreamLimit = o.streamLimit
	}
	if o.gpuMinRuntime > 0 {
		cfg.GPUMinRuntime = o.gpuMinRuntime
	}
	cfg.LocalEngines = o.localEngines
	cfg.ArtifactsURL = o.artifactsURL
	cfg.ArtifactsProjectLimit = o.artifactLimit
	cfg.ArtifactsImport = o.artifactsImport
	if cfg.ArtifactsURL == "" {
		cfg.ArtifactsURL = "file://" + t.TempDir()
	}

	ctx, cancel := context.WithCancel(context.Background())
	// One registry for both, as in `atelier dev`: the gateway's /metrics
	// shows the worker's run, step and Temporal SDK metrics too.
	s := &stack{t: t, cfg: cfg, project: "team-a", metrics: telemetry.New(telemetry.Options{SpanExporter: o.spanExporter})}

	gw, gwClean, err := wire.InitGateway(ctx, cfg, s.metrics)
	require.NoError(t, err)
	var wg sync.WaitGroup
	run := func(p app.Process) {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.Run(ctx) }()
	}
	run(gw)
	var wkClean func()
	if !o.noWorker {
		var wk *app.Worker
		wk, wkClean, err = wire.InitWorker(ctx, cfg, s.metrics, gopipeline.Examples())
		require.NoError(t, err)
		if o.register != nil {
			o.register(wk.Registry())
		}
		run(wk)
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if wkClean != nil {
			wkClean()
		}
		gwClean()
	})
	addr, err := gw.Addr(ctx)
	require.NoError(t, err)
	s.port = addr[strings.LastIndexByte(addr, ':')+1:]
	s.url = "http://127.0.0.1:" + s.port

	st, err := store.Open(ctx, direct)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	s.store = st
	_, err = st.CreateProject(ctx, catalog.Project{Name: s.project})
	require.NoError(t, err)
	secret, hash := tokens.New()
	_, err = st.CreateToken(ctx, catalog.Token{Name: "ci-editor", Project: s.project, Role: tokens.RoleEditor}, hash)
	require.NoError(t, err)
	s.token = secret
	if o.temporal != nil {
		s.temporal, err = client.DialContext(ctx, o.temporal.ClientOptions())
		require.NoError(t, err)
		t.Cleanup(s.temporal.Close)
	} else {
		s.temporal = temporaltest.Client(t)
	}
	if !o.noWorker {
		// The worker publishes its Go pipelines when it starts polling;
		// a run started by name before that is a 404.
		require.Eventually(t, func() bool {
			_, err := st.GetGoWorkflow(ctx, gopipeline.Name)
			return err == nil
		}, 30*time.Second, 20*time.Millisecond, "the worker never published %s", gopipeline.Name)
	}
	return s
}

// raw sends a request the generated client cannot express (a body off
// the schema, a link the API returned) with the stack's token and returns
// the status and body. Everything else goes through s.client().
func (s *stack) raw(method, path string, body []byte) (int, []byte) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	require.NoError(s.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp.StatusCode, b
}

// path is a path under the stack's project.
func (s *stack) path(format string, args ...any) string {
	return fmt.Sprintf("/v1/projects/%s", s.project) + fmt.Sprintf(format, args...)
}

// client is the generated REST client acting with the stack's token.
func (s *stack) client() *gen.ClientWithResponses { return s.clientAs(s.token) }

// clientAs is the generated REST client acting with the token secret.
func (s *stack) clientAs(secret string) *gen.ClientWithResponses {
	s.t.Helper()
	c, err := gen.NewClientWithResponses(s.url, gen.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+secret)
		return nil
	}))
	require.NoError(s.t, err)
	return c
}

// push stores a version of pipeline name from YAML, as `atelier pipelines
// push` does; it returns the status and, on a 422, the problems by path.
func (s *stack) push(name, yaml string) (int, map[string]string) {
	s.t.Helper()
	res, err := s.client().CreatePipelineVersionWithBodyWithResponse(context.Background(), s.project, name, "application/yaml", strings.NewReader(yaml))
	require.NoError(s.t, err)
	problems := map[string]string{}
	if p := res.ApplicationproblemJSON422; p != nil {
		for _, e := range val(p.Errors) {
			problems[e.Path] = e.Message
		}
	}
	return res.StatusCode(), problems
}

// createPipeline is a push that must be stored.
func (s *stack) createPipeline(name, yaml string) {
	s.t.Helper()
	code, problems := s.push(name, yaml)
	require.Contains(s.t, []int{200, 201}, code, "create pipeline %s: %v", name, problems)
}

// startRunAs starts a run with client c (the stack's token or another)
// and returns its ID.
func (s *stack) startRunAs(c *gen.ClientWithResponses, req gen.CreateRunRequest) string {
	s.t.Helper()
	res, err := c.CreateRunWithResponse(context.Background(), s.project, nil, req)
	require.NoError(s.t, err)
	require.Equal(s.t, 201, res.StatusCode(), "start run: %s", res.Body)
	return res.JSON201.Id
}

// startRun starts a run with the stack's token.
func (s *stack) startRun(req gen.CreateRunRequest) string { return s.startRunAs(s.client(), req) }

// start starts a run of the newest version of pipeline with params (nil:
// the defaults).
func (s *stack) start(pipeline string, params map[string]any) string {
	s.t.Helper()
	req := gen.CreateRunRequest{Pipeline: &pipeline}
	if params != nil {
		req.Params = &params
	}
	return s.startRun(req)
}

// goInput is v as the input of a Go pipeline's run.
func goInput(t *testing.T, v any) *json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	m := json.RawMessage(b)
	return &m
}

// run reads a run: its status code and, on a 200, the run.
func (s *stack) run(id string) (int, *gen.Run) {
	s.t.Helper()
	res, err := s.client().GetRunWithResponse(context.Background(), s.project, id)
	require.NoError(s.t, err)
	return res.StatusCode(), res.JSON200
}

// getRun reads a run that must exist.
func (s *stack) getRun(id string) gen.Run {
	s.t.Helper()
	code, r := s.run(id)
	require.Equal(s.t, 200, code, "run %s", id)
	return *r
}

// waitRun polls until cond holds for the run (or fails after d).
func (s *stack) waitRun(id string, d time.Duration, what string, cond func(gen.Run) bool) gen.Run {
	s.t.Helper()
	deadline := time.Now().Add(d)
	var last gen.Run
	for {
		// A run started straight through the SDK appears once its first
		// mirror write lands: 404 until then.
		if code, r := s.run(id); code == 200 {
			if last = *r; cond(last) {
				return last
			}
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(last, "", "  ")
			s.t.Fatalf("run %s: timed out after %s waiting for %s; last seen:\n%s", id, d, what, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *stack) waitTerminal(id string, d time.Duration) gen.Run {
	return s.waitRun(id, d, "a terminal state", func(r gen.Run) bool { return terminal(r.State) })
}

// waitStepState waits until step of run id is in state.
func (s *stack) waitStepState(id, step string, state gen.StepState) gen.Run {
	s.t.Helper()
	return s.waitRun(id, 30*time.Second, step+" "+string(state), func(r gen.Run) bool {
		return r.Status != nil && stepByName(r, step).State == state
	})
}

// terminal: the run ended and will not change again.
func terminal(st gen.RunState) bool {
	switch st {
	case gen.RunStateSUCCEEDED, gen.RunStateFAILED, gen.RunStateCANCELLED, gen.RunStateTERMINATED:
		return true
	}
	return false
}

// stepByName is the run's step called name, or the zero step when it has
// none.
func stepByName(r gen.Run, name string) gen.StepStatus {
	if r.Status == nil {
		return gen.StepStatus{}
	}
	for _, st := range r.Status.Steps {
		if st.Name == name {
			return st
		}
	}
	return gen.StepStatus{}
}

// cancel asks for run id to be cancelled (reason "": none, the
// gateway's default); the gateway must accept it.
func (s *stack) cancel(id, reason string) {
	s.t.Helper()
	var req gen.CancelRunRequest
	if reason != "" {
		req.Reason = &reason
	}
	res, err := s.client().CancelRunWithResponse(context.Background(), s.project, id, req)
	require.NoError(s.t, err)
	require.Equal(s.t, 202, res.StatusCode(), "cancel %s: %s", id, res.Body)
}

// retry starts a retry of run id (POST …/retry); it returns the new run's ID.
func (s *stack) retry(id string, req gen.RetryRunRequest) string {
	s.t.Helper()
	res, err := s.client().RetryRunWithResponse(context.Background(), s.project, id, req)
	require.NoError(s.t, err)
	require.Equal(s.t, 201, res.StatusCode(), "retry %s: %s", id, res.Body)
	return res.JSON201.Id
}

// listRuns is the first page of the project's runs matching p.
func (s *stack) listRuns(p gen.ListRunsParams) []gen.Run {
	s.t.Helper()
	res, err := s.client().ListRunsWithResponse(context.Background(), s.project, &p)
	require.NoError(s.t, err)
	require.Equal(s.t, 200, res.StatusCode(), "list runs: %s", res.Body)
	return res.JSON200.Runs
}

// stepLog is a step's log (p: attempt and item; nil for the newest
// attempt); it must be served.
func (s *stack) stepLog(run, step string, p *gen.GetStepLogsParams) string {
	s.t.Helper()
	res, err := s.client().GetStepLogsWithResponse(context.Background(), s.project, run, step, p)
	require.NoError(s.t, err)
	require.Equal(s.t, 200, res.StatusCode(), "log of %s/%s: %s", run, step, res.Body)
	return string(res.Body)
}

// stepLogSoFar is stepLog for a log that may not be served yet ("").
func (s *stack) stepLogSoFar(run, step string) string {
	s.t.Helper()
	res, err := s.client().GetStepLogsWithResponse(context.Background(), s.project, run, step, nil)
	require.NoError(s.t, err)
	if res.StatusCode() != 200 {
		return ""
	}
	return string(res.Body)
}

// events is the whole event stream of a finished run (the gateway ends
// it after the terminal state).
func (s *stack) events(id string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.client().StreamRunEventsWithResponse(ctx, s.project, id, nil)
	require.NoError(s.t, err)
	require.Equal(s.t, 200, res.StatusCode(), "events of %s: %s", id, res.Body)
	return string(res.Body)
}

func ptrTo[T any](v T) *T { return &v }

// val is *p, or the zero value for nil (the client's optional fields).
func val[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// waitFile waits until path exists and returns its content.
func waitFile(t *testing.T, path string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not appear within %s", path, d)
	return ""
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// atelierBinary builds cmd/atelier once per test binary, for tests that
// need a worker they can kill -9.
func atelierBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "atelier-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "atelier")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/atelier").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, binErr)
	return binPath
}

// stepDataDir is a data dir that the unprivileged user steps run as (when
// the tests run as root) can reach, like a production worker's.
func stepDataDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{d, filepath.Dir(d)} {
		require.NoError(t, os.Chmod(p, 0o711))
	}
	return d
}

// stepScratchDir is a directory test steps write marker files to: steps
// run as an unprivileged user when the tests run as root, so it must be
// writable by anyone (as /tmp is), like a shared directory a real pipeline
// would be given.
func stepScratchDir(t *testing.T) string {
	t.Helper()
	d := stepDataDir(t)
	require.NoError(t, os.Chmod(d, 0o777))
	return d
}
