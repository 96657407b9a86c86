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
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/examples/gopipeline"
	"github.com/atelier-ml/atelier/internal/app"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/config"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/internal/store/storetest"
	"github.com/atelier-ml/atelier/internal/telemetry"
	"github.com/atelier-ml/atelier/internal/temporaltest"
	"github.com/atelier-ml/atelier/internal/tokens"
	"github.com/atelier-ml/atelier/wire"
	"github.com/atelier-ml/atelier/workflows"
)

func TestMain(m *testing.M) { temporaltest.Main(m) }

// stack is one isolated Atelier: its own database and task queue on the
// shared Temporal dev server, a gateway on a free port and (optionally) an
// in-process worker.
type stack struct {
	t        *testing.T
	cfg      config.Config
	url      string
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
	// streamLimit overrides the gateway's open streams per token.
	streamLimit int
	// gpuMinRuntime overrides how long a GPU step runs before it may be
	// preempted.
	gpuMinRuntime time.Duration
	// kueueQueue makes a kubeEnv's cluster worker submit to Kueue.
	kueueQueue string
	// localEngines is the worker's --local-engine.
	localEngines map[string]string
}

func newStack(t *testing.T, opts ...stackOptions) *stack {
	t.Helper()
	var o stackOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	ts := temporaltest.Server(t)
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
	cfg.DataDir = stepDataDir(t)
	cfg.LogLevel = "warn"
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Examples = true // like the dev stack
	// Webhook receivers are httptest servers on loopback (as in the dev
	// stack); retries quick enough for a test.
	cfg.WebhookAllowPrivate = true
	cfg.WebhookBackoff = 200 * time.Millisecond
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

	ctx, cancel := context.WithCancel(context.Background())
	// One registry for both, as in `atelier dev`: the gateway's /metrics
	// shows the worker's run, step and Temporal SDK metrics too.
	s := &stack{t: t, cfg: cfg, project: "team-a", metrics: telemetry.New(telemetry.Options{})}

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
		wk, wkClean, err = wire.InitWorker(ctx, cfg, s.metrics)
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
	s.url = "http://" + addr

	st, err := store.Open(ctx, direct)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	s.store = st
	_, err = st.CreateProject(ctx, catalog.Project{Name: s.project})
	require.NoError(t, err)
	secret, hash := tokens.New()
	_, err = st.CreateToken(ctx, catalog.Token{Name: "ci-editor", Project: s.project, Role: catalog.RoleEditor}, hash)
	require.NoError(t, err)
	s.token = secret
	s.temporal = temporaltest.Client(t)
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

// do sends a JSON (or raw, when body is []byte) request with the stack's
// token and decodes a JSON response into out (if non-nil).
func (s *stack) do(method, path string, body any, out any, hdr ...string) int {
	s.t.Helper()
	var rd io.Reader
	ct := "application/json"
	switch b := body.(type) {
	case nil:
	case []byte:
		rd, ct = bytes.NewReader(b), "application/yaml"
	default:
		buf, err := json.Marshal(b)
		require.NoError(s.t, err)
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	require.NoError(s.t, err)
	if rd != nil {
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	if out != nil && len(raw) > 0 {
		require.NoError(s.t, json.Unmarshal(raw, out), "body: %s", raw)
	}
	return resp.StatusCode
}

func (s *stack) path(format string, args ...any) string {
	return fmt.Sprintf("/v1/projects/%s", s.project) + fmt.Sprintf(format, args...)
}

// runView is the subset of the run resource the tests read.
type runView struct {
	ID     string               `json:"id"`
	State  workflows.RunState   `json:"state"`
	Status *workflows.RunStatus `json:"status"`
}

func (s *stack) createPipeline(name, yaml string) {
	s.t.Helper()
	var out map[string]any
	code := s.do("POST", s.path("/pipelines/%s/versions", name), []byte(yaml), &out)
	require.Contains(s.t, []int{200, 201}, code, "create pipeline: %v", out)
}

func (s *stack) startRun(body map[string]any) string {
	s.t.Helper()
	var out runView
	code := s.do("POST", s.path("/runs"), body, &out)
	require.Equal(s.t, 201, code, "start run: %+v", out)
	return out.ID
}

func (s *stack) getRun(id string) runView {
	s.t.Helper()
	var out runView
	code := s.do("GET", s.path("/runs/%s", id), nil, &out)
	require.Equal(s.t, 200, code)
	return out
}

// waitRun polls until cond holds for the run (or fails after d).
func (s *stack) waitRun(id string, d time.Duration, what string, cond func(runView) bool) runView {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		// A run started straight through the SDK appears once its first
		// mirror write lands: 404 until then.
		var r runView
		if code := s.do("GET", s.path("/runs/%s", id), nil, nil); code == 200 {
			if r = s.getRun(id); cond(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(r, "", "  ")
			s.t.Fatalf("run %s: timed out after %s waiting for %s; last seen:\n%s", id, d, what, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *stack) waitTerminal(id string, d time.Duration) runView {
	return s.waitRun(id, d, "a terminal state", func(r runView) bool { return r.State.Terminal() })
}

func stepByName(r runView, name string) workflows.StepStatus {
	for _, st := range r.Status.Steps {
		if st.Name == name {
			return st
		}
	}
	return workflows.StepStatus{}
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

func (s *stack) rawGet(t *testing.T, path string) string {
	t.Helper()
	req, err := http.NewRequest("GET", s.url+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	return string(b)
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
