package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/examples/modelserver"
)

// load sends completions through the gateway's endpoint proxy, one after
// another on a few connections, until stopped, and counts the answers by
// status and by the revision that answered.
type load struct {
	s      *stack
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	status map[int]int
	byRev  map[string]int
}

func startLoad(s *stack, workers int) *load {
	l := &load{s: s, stop: make(chan struct{}), status: map[int]int{}, byRev: map[string]int{}}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				code, rev, _ := s.complete(context.Background())
				l.mu.Lock()
				l.status[code]++
				l.byRev[rev]++
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// snapshot copies the counts so far.
func (l *load) snapshot() (map[int]int, map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.status), maps.Clone(l.byRev)
}

func (l *load) end() (map[int]int, map[string]int) {
	close(l.stop)
	l.wg.Wait()
	return l.status, l.byRev
}

// complete sends one completion through the gateway; it answers the
// status, the revision that answered and the body. Raw HTTP: the
// endpoint's own (OpenAI-style) API behind the proxy is not Atelier's and
// not in the generated client.
func (s *stack) complete(ctx context.Context) (int, string, string) {
	return s.completePinned(ctx, "")
}

// completePinned is complete with X-Atelier-Revision set to pin (none
// when empty): a request for that revision whatever its weight.
func (s *stack) completePinned(ctx context.Context, pin string) (int, string, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+s.path("/endpoints/chat/v1/completions"),
		strings.NewReader(`{"model":"tiny","prompt":"hi","max_tokens":4}`))
	if err != nil {
		return 0, "", err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	if pin != "" {
		req.Header.Set("X-Atelier-Revision", pin)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("X-Atelier-Revision"), string(b)
}

// The endpoint tests drive one endpoint, "chat".

// endpointSpec is a spec written as a map: the client's EndpointSpec is
// raw JSON, which the gateway decodes strictly.
func endpointSpec(t *testing.T, spec map[string]any) gen.EndpointSpec {
	t.Helper()
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	return gen.EndpointSpec(b)
}

// createEndpoint creates chat on cluster ("" for the local runtime).
func (s *stack) createEndpoint(t *testing.T, cluster string, spec map[string]any) gen.Endpoint {
	t.Helper()
	body := gen.EndpointCreate{Name: "chat", Spec: endpointSpec(t, spec)}
	if cluster != "" {
		body.Cluster = &cluster
	}
	res, err := s.client().CreateEndpointWithResponse(context.Background(), s.project, body)
	require.NoError(t, err)
	require.Equal(t, 201, res.StatusCode(), "create endpoint: %s", res.Body)
	return *res.JSON201
}

// updateEndpoint replaces chat's spec.
func (s *stack) updateEndpoint(t *testing.T, spec map[string]any) gen.Endpoint {
	t.Helper()
	res, err := s.client().UpdateEndpointWithResponse(context.Background(), s.project, "chat", endpointSpec(t, spec))
	require.NoError(t, err)
	require.Equal(t, 200, res.StatusCode(), "update endpoint: %s", res.Body)
	return *res.JSON200
}

// getEndpoint reads chat: the response, whatever its status.
func (s *stack) getEndpoint(t *testing.T) *gen.GetEndpointResponse {
	t.Helper()
	res, err := s.client().GetEndpointWithResponse(context.Background(), s.project, "chat")
	require.NoError(t, err)
	return res
}

// deleteEndpoint deletes chat and waits until it is gone.
func (s *stack) deleteEndpoint(t *testing.T) {
	t.Helper()
	res, err := s.client().DeleteEndpointWithResponse(context.Background(), s.project, "chat")
	require.NoError(t, err)
	require.Equal(t, 202, res.StatusCode(), "delete endpoint: %s", res.Body)
	require.Eventually(t, func() bool { return s.getEndpoint(t).StatusCode() == 404 }, 60*time.Second, 200*time.Millisecond,
		"the endpoint was not deleted")
}

// cleanupEndpoint deletes chat when the test ends, best effort: endpoint
// workflows outlive the stack on the shared Temporal server.
func (s *stack) cleanupEndpoint(t *testing.T) {
	t.Cleanup(func() {
		ctx, c := context.Background(), s.client()
		_, _ = c.DeleteEndpointWithResponse(ctx, s.project, "chat")
		for i := 0; i < 100; i++ {
			if res, err := c.GetEndpointWithResponse(ctx, s.project, "chat"); err == nil && res.StatusCode() == 404 {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

func (s *stack) waitEndpoint(t *testing.T, d time.Duration, what string, cond func(gen.Endpoint) bool) gen.Endpoint {
	t.Helper()
	var last gen.Endpoint
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if res := s.getEndpoint(t); res.StatusCode() == 200 {
			if last = *res.JSON200; cond(last) {
				return last
			}
		}
	}
	scale := "none"
	if last.Scale != nil {
		scale = fmt.Sprintf("%+v", *last.Scale)
	}
	t.Fatalf("endpoint never %s in %s; observed %+v, replicas %+v, last scale %s; events:%s", what, d, last.Observed, last.Replicas, scale, eventLine(last))
	return last
}

func eventLine(v gen.Endpoint) string {
	var b strings.Builder
	for _, e := range v.Events {
		fmt.Fprintf(&b, "\n  %s r%d %s: %s", e.At.Format("15:04:05.000"), val(e.Revision), e.Kind, e.Message)
	}
	return b.String()
}

func hasEvent(v gen.Endpoint, kind string, rev int) bool {
	for _, e := range v.Events {
		if e.Kind == kind && val(e.Revision) == rev {
			return true
		}
	}
	return false
}

// readyReplicas is true when the stable revision's observed replicas
// (ready, all) satisfy ok.
func readyReplicas(ok func(ready, replicas int) bool) func(gen.Endpoint) bool {
	return func(v gen.Endpoint) bool {
		for _, o := range v.Observed {
			if o.Revision == v.Stable {
				return ok(o.Ready, o.Replicas)
			}
		}
		return false
	}
}

func servedBy(rev int) func(gen.Endpoint) bool {
	return func(v gen.Endpoint) bool {
		if v.Stable != rev || v.Rollout != nil {
			return false
		}
		for _, o := range v.Observed {
			if o.Revision == rev && o.Ready >= 1 {
				return true
			}
		}
		return false
	}
}

// An endpoint on the local runtime, used the way an application would:
// every request through the gateway (a viewer-level token would do), with
// real replica processes behind it. Under a steady load:
//   - a canary whose engine answers 5xx to half its requests is rolled
//     back automatically by its error-rate gate, judged on the gateway's
//     own counts, while revision 1 keeps serving;
//   - a healthy canary is promoted;
//   - the endpoint scales to zero when idle, and requests sent while it
//     is at zero are held and all answered once a replica is up.
func TestEndpointServesThroughTheGateway(t *testing.T) {
	engine := modelserverBinary(t)
	s := newStack(t, stackOptions{localEngines: map[string]string{"vllm": engine}})
	spec := func(env map[string]string, minReplicas int) map[string]any {
		// In a fixed order: the order of env is part of the revision (a
		// reordered env is a new template that rolls out).
		var e []map[string]string
		for _, k := range slices.Sorted(maps.Keys(env)) {
			e = append(e, map[string]string{"name": k, "value": env[k]})
		}
		return map[string]any{"backend": "vllm", "model": map[string]any{"name": "tiny"}, "image": "vllm/vllm-openai:v0.9.1",
			"env": e, "replicas": map[string]any{"min": minReplicas, "max": 2},
			"autoscaling": map[string]any{"stableWindow": "6s", "scaleDownDelay": "1s", "idleTimeout": "30s"},
			"rollout": map[string]any{"strategy": "canary",
				"canary": map[string]any{"steps": []map[string]any{{"weight": 50, "pause": "4s"}}},
				"gates":  map[string]any{"maxErrorRate": 0.05, "minSamples": 20, "analysisInterval": "2s"}}}
	}
	delay := map[string]string{modelserver.EnvStartupDelay: "1s"}
	s.createEndpoint(t, "", spec(delay, 1))
	s.cleanupEndpoint(t)
	s.waitEndpoint(t, 90*time.Second, "served revision 1", servedBy(1))
	code, rev, body := s.complete(context.Background())
	require.Equal(t, 200, code, body)
	require.Equal(t, "1", rev)

	l := startLoad(s, 4)
	// A canary with a 5xx burst: rolled back by the gate, automatically.
	bad := map[string]string{modelserver.EnvStartupDelay: "1s", modelserver.EnvErrorRate: "0.5"}
	updated := time.Now()
	s.updateEndpoint(t, spec(bad, 1))
	v := s.waitEndpoint(t, 2*time.Minute, "rolled revision 2 back", func(v gen.Endpoint) bool {
		return v.Rollout == nil && v.Stable == 1 && hasEvent(v, "RolloutRollBack", 2)
	})
	rolledBack := time.Since(updated)
	t.Logf("5xx canary rolled back %s after the update:%s", rolledBack.Round(100*time.Millisecond), eventLine(v))

	// A healthy canary is promoted.
	good := map[string]string{modelserver.EnvStartupDelay: "1s", modelserver.EnvServiceTime: "2ms"}
	updated = time.Now()
	s.updateEndpoint(t, spec(good, 1))
	s.waitEndpoint(t, 2*time.Minute, "promoted revision 3", servedBy(3))
	t.Logf("healthy canary promoted %s after the update", time.Since(updated).Round(100*time.Millisecond))
	status, byRev := l.end()
	t.Logf("load: answers by status %v, by revision %v", status, byRev)
	require.Positive(t, byRev["2"], "the bad canary got a share of the traffic")
	require.Positive(t, byRev["3"])
	require.Zero(t, status[502]+status[503]+status[429], "no request lost to the proxy: %v", status)

	// No traffic at all: a canary whose gates may probe is judged on
	// synthetic requests the worker sends to its replica.
	probed := map[string]string{modelserver.EnvStartupDelay: "1s", modelserver.EnvServiceTime: "1ms"}
	withProbes := func(minReplicas int) map[string]any {
		sp := spec(probed, minReplicas)
		sp["rollout"].(map[string]any)["gates"].(map[string]any)["syntheticProbes"] = true
		return sp
	}
	s.updateEndpoint(t, withProbes(1))
	v = s.waitEndpoint(t, 2*time.Minute, "promoted revision 4 on probes", servedBy(4))
	t.Logf("canary judged on synthetic probes, promoted:%s", eventLine(v))

	// Idle: scale to zero (settings only: applied in place).
	s.updateEndpoint(t, withProbes(0))
	s.waitEndpoint(t, 2*time.Minute, "scaled to zero", readyReplicas(func(n, replicas int) bool { return n == 0 && replicas == 0 }))
	// Requests at zero are held and answered once a replica is up (its
	// engine takes 1 s to load).
	var failed atomic.Int32
	var wg sync.WaitGroup
	start := time.Now()
	latencies := make([]time.Duration, 5)
	for i := range latencies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if code, _, body := s.complete(ctx); code != 200 {
				failed.Add(1)
				t.Logf("request at zero: %d %s", code, body)
			}
			latencies[i] = time.Since(start)
		}()
	}
	wg.Wait()
	require.Zero(t, failed.Load(), "requests failed during the cold start")
	t.Logf("0→1: the 5 held requests were answered after %v", latencies)
}

// Scale from zero to several replicas under a steady load, then a
// blue-green rollout under the same load, all through the gateway:
//   - requests sent at zero are held, the first replica answers them, and
//     the queue signal scales the endpoint out to its maximum;
//   - the preview starts at 0% traffic: unpinned requests keep going to
//     the stable revision while pinned ones reach the preview;
//   - a manual promote switches all traffic at once;
//   - no request is lost to the proxy at any point.
func TestEndpointScalesOutAndPromotesBlueGreenUnderLoad(t *testing.T) {
	engine := modelserverBinary(t)
	s := newStack(t, stackOptions{localEngines: map[string]string{"vllm": engine}})
	spec := func(version string) map[string]any {
		return map[string]any{"backend": "vllm", "model": map[string]any{"name": "tiny"}, "image": "vllm/vllm-openai:v0.9.1",
			"env": []map[string]string{
				{"name": modelserver.EnvModelVersion, "value": version},
				{"name": modelserver.EnvServiceTime, "value": "200ms"},
				{"name": modelserver.EnvStartupDelay, "value": "1s"},
			},
			"replicas": map[string]any{"min": 0, "max": 3},
			// 8 clients keep about 8 requests in the engines: 4 replicas
			// wanted at 2 per replica, capped at 3.
			"autoscaling": map[string]any{"targetQueuePerReplica": 2, "stableWindow": "6s", "scaleDownDelay": "0s", "idleTimeout": "30s"},
			"rollout":     map[string]any{"strategy": "blueGreen"}}
	}
	s.createEndpoint(t, "", spec("v1"))
	s.cleanupEndpoint(t)
	s.waitEndpoint(t, 90*time.Second, "served revision 1", servedBy(1))
	s.waitEndpoint(t, 2*time.Minute, "scaled to zero while idle", readyReplicas(func(n, replicas int) bool { return n == 0 && replicas == 0 }))

	// 0 → 1 → N under load.
	start := time.Now()
	l := startLoad(s, 8)
	s.waitEndpoint(t, 2*time.Minute, "scaled out to 3 ready replicas", readyReplicas(func(n, _ int) bool { return n == 3 }))
	t.Logf("0→3 ready replicas under load in %s", time.Since(start).Round(100*time.Millisecond))

	// Blue-green: a full preview at 0% while revision 1 serves.
	s.updateEndpoint(t, spec("v2"))
	v := s.waitEndpoint(t, 2*time.Minute, "previewed revision 2", func(v gen.Endpoint) bool {
		if v.Rollout == nil || v.Rollout.Revision != 2 || v.Rollout.Stage != "Preview" {
			return false
		}
		for _, o := range v.Observed {
			if o.Revision == 2 && o.Ready >= 1 {
				return true
			}
		}
		return false
	})
	if v.Rollout.Reason != nil {
		t.Logf("preview up: %s", *v.Rollout.Reason)
	}
	for range 5 {
		code, rev, body := s.completePinned(context.Background(), "2")
		require.Equal(t, 200, code, body)
		require.Equal(t, "2", rev, "a pinned request reaches the preview")
	}
	_, beforePromote := l.snapshot()
	require.Zero(t, beforePromote["2"], "the preview got unpinned traffic before its promote: %v", beforePromote)

	promoted := time.Now()
	res, err := s.client().PromoteEndpointWithResponse(context.Background(), s.project, "chat")
	require.NoError(t, err)
	require.Equal(t, 200, res.StatusCode(), "%s", res.Body)
	s.waitEndpoint(t, time.Minute, "promoted revision 2", servedBy(2))
	t.Logf("blue-green promoted %s after the request", time.Since(promoted).Round(100*time.Millisecond))
	// Unpinned traffic now reaches revision 2 only.
	for range 5 {
		code, rev, body := s.complete(context.Background())
		require.Equal(t, 200, code, body)
		require.Equal(t, "2", rev)
	}
	status, byRev := l.end()
	t.Logf("load: answers by status %v, by revision %v", status, byRev)
	require.Positive(t, byRev["1"])
	require.Positive(t, byRev["2"])
	require.Equal(t, status[200], sumValues(status), "every request answered 200: %v", status)
}

func sumValues(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Kill -9 the worker that owns an endpoint's local replicas in the middle
// of a canary's pause, then start another: the engines the old worker
// started die with it, the new worker starts the recorded replicas of both
// revisions again, the endpoint's workflow carries on where it was, and
// the canary completes. (On Kubernetes the replicas are pods and outlive
// the worker; here the endpoint is down until the new worker is up, and
// its REST view answers 503 meanwhile.)
func TestEndpointRolloutSurvivesWorkerKill9(t *testing.T) {
	engine := modelserverBinary(t)
	s := newStack(t, stackOptions{noWorker: true})
	w := s.startWorkerProcess(t, "worker-1.log", "ATELIER_LOCAL_ENGINES=vllm="+engine)
	spec := func(version string) map[string]any {
		return map[string]any{"backend": "vllm", "model": map[string]any{"name": "tiny"}, "image": "vllm/vllm-openai:v0.9.1",
			"env": []map[string]string{
				{"name": modelserver.EnvModelVersion, "value": version},
				{"name": modelserver.EnvStartupDelay, "value": "1s"},
			},
			"replicas": map[string]any{"min": 1, "max": 1},
			"rollout": map[string]any{"strategy": "canary",
				"canary": map[string]any{"steps": []map[string]any{{"weight": 50, "pause": "5s"}}},
				"gates":  map[string]any{"minSamples": 5, "analysisInterval": "2s", "syntheticProbes": true}}}
	}
	s.createEndpoint(t, "", spec("v1"))
	s.waitEndpoint(t, 90*time.Second, "served revision 1", servedBy(1))

	s.updateEndpoint(t, spec("v2"))
	s.waitEndpoint(t, time.Minute, "paused the canary with revision 2 ready", func(v gen.Endpoint) bool {
		if v.Rollout == nil || v.Rollout.Stage != "CanaryPause" {
			return false
		}
		for _, o := range v.Observed {
			if o.Revision == 2 && o.Ready >= 1 {
				return true
			}
		}
		return false
	})
	pids := enginePIDs(t, filepath.Join(s.cfg.DataDir, "endpoints", s.project, "chat"))
	require.Len(t, pids, 2, "one engine per revision")
	require.NoError(t, w.Process.Signal(syscall.SIGKILL))
	_ = w.Wait()
	killed := time.Now()
	for _, pid := range pids {
		require.Eventually(t, func() bool { return processGone(pid) }, 10*time.Second, 50*time.Millisecond,
			"engine %d outlived its worker", pid)
	}

	// Without a worker the endpoint's workflow cannot answer: a clear 503,
	// not a request that hangs.
	res := s.getEndpoint(t)
	require.Equal(t, 503, res.StatusCode(), "%s", res.Body)
	require.NotNil(t, res.ApplicationproblemJSON503)
	require.Contains(t, val(res.ApplicationproblemJSON503.Detail), "no worker may be serving")

	s.startWorkerProcess(t, "worker-2.log", "ATELIER_LOCAL_ENGINES=vllm="+engine)
	// Registered after the worker so that it runs before the worker stops.
	s.cleanupEndpoint(t)
	v := s.waitEndpoint(t, 2*time.Minute, "promoted revision 2 after the worker restart", servedBy(2))
	t.Logf("canary promoted %s after the kill:%s", time.Since(killed).Round(100*time.Millisecond), eventLine(v))
	code, rev, body := s.complete(context.Background())
	require.Equal(t, 200, code, body)
	require.Equal(t, "2", rev)
}

// enginePIDs reads the process groups the local runtime recorded for an
// endpoint's replicas (<endpoint dir>/r<N>/<replica>.pid).
func enginePIDs(t *testing.T, dir string) []int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "r*", "*.pid"))
	require.NoError(t, err)
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err, "pid file %s", f)
		pids = append(pids, pid)
	}
	return pids
}
