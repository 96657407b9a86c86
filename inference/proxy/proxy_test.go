package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/inference/proxy"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/platform/telemetry/telemetrytest"
)

// routes is a Resolver a test changes as the endpoint would.
type routes struct {
	mu     sync.Mutex
	route  proxy.Route
	err    error
	asked  int
	onHeld func() // called on the first report of held requests
}

func (r *routes) Resolve(context.Context, string, string) (proxy.Route, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked++
	return r.route, r.err
}

func (r *routes) set(rt proxy.Route) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.route = rt
}

// reports collects what the proxy reports.
type reports struct {
	mu      sync.Mutex
	got     []proxy.Report
	onHeld  func()
	woke    bool
	traffic map[int]inference.RevisionTraffic
}

func (r *reports) Report(_ context.Context, project, endpoint string, rep proxy.Report) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if project != "vision" || endpoint != "chat" {
		return fmt.Errorf("report for %s/%s", project, endpoint)
	}
	r.got = append(r.got, rep)
	if r.traffic == nil {
		r.traffic = map[int]inference.RevisionTraffic{}
	}
	for _, t := range rep.Revisions {
		sum := r.traffic[t.Revision]
		sum.Revision = t.Revision
		sum.Add(t)
		r.traffic[t.Revision] = sum
	}
	if rep.Held > 0 && !r.woke && r.onHeld != nil {
		r.woke = true
		go r.onHeld()
	}
	return nil
}

func (r *reports) total(rev int) inference.RevisionTraffic {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.traffic[rev]
}

// replica is an engine answering with its name; status 0 means 200.
func replica(t *testing.T, name string, status int) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			http.Error(w, "the caller's token reached the engine", http.StatusTeapot)
			return
		}
		if status != 0 {
			w.WriteHeader(status)
		}
		_, _ = fmt.Fprintf(w, "%s %s %s", name, r.Method, r.URL.RequestURI())
	}))
	t.Cleanup(s.Close)
	return s
}

type harness struct {
	t   *testing.T
	rt  *routes
	rep *reports
	srv *httptest.Server
}

func newHarness(t *testing.T, o proxy.Options) *harness {
	h := &harness{t: t, rt: &routes{}, rep: &reports{}}
	if o.ReportEvery == 0 {
		o.ReportEvery = 20 * time.Millisecond
	}
	if o.RouteTTL == 0 {
		o.RouteTTL = time.Nanosecond // every request sees the route the test set last
	}
	p, err := proxy.New(h.rt, h.rep, o)
	require.NoError(t, err)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := p.Serve(w, r, "vision", "chat", r.URL.Path)
		var pe *proxy.Error
		if errors.As(err, &pe) {
			if pe.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(pe.RetryAfter))
			}
			http.Error(w, pe.Message, pe.Status)
		} else if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// call sends one request with a token and an optional pinned revision.
func (h *harness) call(ctx context.Context, pin string) (int, string, http.Header) {
	h.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+"/v1/chat/completions?stream=false", nil)
	require.NoError(h.t, err)
	req.Header.Set("Authorization", "Bearer atl_secret")
	if pin != "" {
		req.Header.Set(proxy.RevisionHeader, pin)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(h.t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

// Requests split by weight among ready revisions, reach the engine
// without the caller's token, at the path after the endpoint, and every
// one is reported with its revision.
func TestWeightsSplitTrafficAndEveryRequestIsReported(t *testing.T) {
	h := newHarness(t, proxy.Options{})
	a, b1, b2 := replica(t, "r1", 0), replica(t, "r2a", 0), replica(t, "r2b", 0)
	h.rt.set(proxy.Route{Targets: []proxy.Target{
		{Revision: 1, Weight: 80, URLs: []string{a.URL}},
		{Revision: 2, Weight: 20, URLs: []string{b1.URL, b2.URL}},
	}})
	const n = 500
	byReplica := map[string]int{}
	for range n {
		code, body, hdr := h.call(t.Context(), "")
		require.Equal(t, http.StatusOK, code, body)
		var name, method, uri string
		_, err := fmt.Sscan(body, &name, &method, &uri)
		require.NoError(t, err)
		require.Equal(t, "/v1/chat/completions?stream=false", uri)
		require.Equal(t, string(name[1]), hdr.Get(proxy.RevisionHeader), "the response names the revision")
		byReplica[name]++
	}
	canary := byReplica["r2a"] + byReplica["r2b"]
	// 20% of 500 is 100; 5 standard deviations is ±45.
	require.InDelta(t, 100, canary, 45, "%v", byReplica)
	require.InDelta(t, byReplica["r2a"], byReplica["r2b"], 2, "a revision's replicas take turns")
	require.Eventually(t, func() bool { return h.rep.total(1).Requests+h.rep.total(2).Requests == n }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, int64(canary), h.rep.total(2).Requests)
	require.Equal(t, int64(canary), h.rep.total(2).Latency.Total())
	require.Zero(t, h.rep.total(1).Errors+h.rep.total(2).Errors)
}

// Requests to an endpoint are counted by response class, and with tenant
// labels by endpoint and revision; requests the proxy answers itself (a
// bad pin, a revision without replicas) are counted too.
func TestRequestMetrics(t *testing.T) {
	for _, tenant := range []bool{false, true} {
		m := telemetry.New(telemetry.Options{TenantLabels: tenant})
		h := newHarness(t, proxy.Options{MaxHold: 100 * time.Millisecond, Metrics: m})
		ok, bad := replica(t, "r1", 0), replica(t, "r2", http.StatusInternalServerError)
		h.rt.set(proxy.Route{Targets: []proxy.Target{
			{Revision: 1, Weight: 100, URLs: []string{ok.URL}},
			{Revision: 2, Weight: 0, URLs: []string{bad.URL}},
		}})
		for range 3 {
			h.call(t.Context(), "")
		}
		h.call(t.Context(), "2")
		h.call(t.Context(), "two") // 400 from the proxy
		v, err := telemetrytest.Gather(m.Registry)
		require.NoError(t, err)
		s := telemetrytest.Series
		if !tenant {
			require.Equal(t, 3.0, v[s("atelier_endpoint_requests_total", "code", "2xx")], "%v", v)
			require.Equal(t, 1.0, v[s("atelier_endpoint_requests_total", "code", "5xx")])
			require.Equal(t, 1.0, v[s("atelier_endpoint_requests_total", "code", "4xx")])
			require.Equal(t, 5.0, v.Sum("atelier_endpoint_request_duration_seconds_count"))
			continue
		}
		require.Equal(t, 3.0, v[s("atelier_endpoint_requests_total", "code", "2xx", "endpoint", "vision/chat", "revision", "1")], "%v", v)
		require.Equal(t, 1.0, v[s("atelier_endpoint_requests_total", "code", "5xx", "endpoint", "vision/chat", "revision", "2")])
		require.Equal(t, 1.0, v[s("atelier_endpoint_requests_total", "code", "4xx", "endpoint", "vision/chat", "revision", "")])
	}
}

// A revision at 0% gets no traffic unless a request pins it (a blue-green
// preview); a bad pin is the caller's error.
func TestPinnedRevision(t *testing.T) {
	h := newHarness(t, proxy.Options{MaxHold: 200 * time.Millisecond})
	blue, green := replica(t, "r1", 0), replica(t, "r2", 0)
	h.rt.set(proxy.Route{Targets: []proxy.Target{
		{Revision: 1, Weight: 100, URLs: []string{blue.URL}},
		{Revision: 2, Weight: 0, URLs: []string{green.URL}},
	}})
	for range 20 {
		_, body, _ := h.call(t.Context(), "")
		require.Contains(t, body, "r1 ")
	}
	_, body, _ := h.call(t.Context(), "2")
	require.Contains(t, body, "r2 ")
	code, body, _ := h.call(t.Context(), "two")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "X-Atelier-Revision must be a revision number")
	code, body, _ = h.call(t.Context(), "7")
	require.Equal(t, http.StatusServiceUnavailable, code, "revision 7 never gets a replica")
	require.Contains(t, body, "no replica of revision 7")
}

// 5xx answers and replicas that do not answer count as errors; the
// caller gets the engine's answer, or a 502 problem.
func TestErrorsAreCounted(t *testing.T) {
	h := newHarness(t, proxy.Options{})
	bad := replica(t, "r1", http.StatusInternalServerError)
	dead := replica(t, "r2", 0)
	dead.Close()
	h.rt.set(proxy.Route{Targets: []proxy.Target{{Revision: 1, Weight: 100, URLs: []string{bad.URL}}}})
	code, _, _ := h.call(t.Context(), "")
	require.Equal(t, http.StatusInternalServerError, code)
	h.rt.set(proxy.Route{Targets: []proxy.Target{{Revision: 2, Weight: 100, URLs: []string{dead.URL}}}})
	code, body, _ := h.call(t.Context(), "")
	require.Equal(t, http.StatusBadGateway, code)
	require.Contains(t, body, "did not answer")
	require.Eventually(t, func() bool { return h.rep.total(1).Errors == 1 && h.rep.total(2).Errors == 1 }, 5*time.Second, 10*time.Millisecond)
}

// At zero replicas a request is held, the endpoint is told at once, and
// the request is answered as soon as a replica is ready: no failure
// during a cold start shorter than the request's deadline. Past MaxHeld,
// requests are refused with 429 and Retry-After; past MaxHold, 503.
func TestScaleFromZeroHoldsRequests(t *testing.T) {
	h := newHarness(t, proxy.Options{MaxHeld: 3, MaxHold: 5 * time.Second})
	r := replica(t, "r1", 0)
	h.rt.set(proxy.Route{Targets: []proxy.Target{{Revision: 1, Weight: 100}}})
	release := make(chan struct{})
	h.rep.onHeld = func() {
		<-release // the replica becomes ready when the test says so
		h.rt.set(proxy.Route{Targets: []proxy.Target{{Revision: 1, Weight: 100, URLs: []string{r.URL}}}})
	}
	type answer struct {
		code int
		body string
	}
	answers := make(chan answer, 3)
	for range 3 {
		go func() {
			code, body, _ := h.call(t.Context(), "")
			answers <- answer{code, body}
		}()
	}
	require.Eventually(t, func() bool {
		h.rep.mu.Lock()
		defer h.rep.mu.Unlock()
		return len(h.rep.got) > 0 && h.rep.got[len(h.rep.got)-1].Held == 3
	}, 5*time.Second, 5*time.Millisecond, "three requests held and reported")
	code, body, hdr := h.call(t.Context(), "")
	require.Equal(t, http.StatusTooManyRequests, code, body)
	require.Equal(t, "5", hdr.Get("Retry-After"))
	close(release)
	for range 3 {
		a := <-answers
		require.Equal(t, http.StatusOK, a.code, a.body)
	}
	require.Eventually(t, func() bool {
		h.rep.mu.Lock()
		defer h.rep.mu.Unlock()
		return h.rep.got[len(h.rep.got)-1].Held == 0
	}, 5*time.Second, 10*time.Millisecond, "the end of the hold is reported")

	short := newHarness(t, proxy.Options{MaxHold: 300 * time.Millisecond})
	short.rt.set(proxy.Route{Targets: []proxy.Target{{Revision: 1, Weight: 100}}})
	code, body, hdr = short.call(t.Context(), "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "became ready within 300ms")
	require.Equal(t, "5", hdr.Get("Retry-After"))
}

// An endpoint that does not exist is a 404; one whose state cannot be
// read is a 503 to retry.
func TestUnknownEndpoint(t *testing.T) {
	h := newHarness(t, proxy.Options{})
	h.rt.err = proxy.ErrNotFound
	code, body, _ := h.call(t.Context(), "")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, `endpoint "chat" not found in project "vision"`)
	h.rt.err = errors.New("temporal is down")
	code, _, hdr := h.call(t.Context(), "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "5", hdr.Get("Retry-After"))
}

// A replica that refuses connections (stopped a moment before the route
// says so) costs no request: it is sent to another replica, body and all.
func TestRefusedConnectionsGoElsewhere(t *testing.T) {
	h := newHarness(t, proxy.Options{})
	live := replica(t, "r2", 0)
	dead := replica(t, "r1", 0)
	dead.Close()
	h.rt.set(proxy.Route{Targets: []proxy.Target{
		{Revision: 1, Weight: 50, URLs: []string{dead.URL}},
		{Revision: 2, Weight: 50, URLs: []string{dead.URL, live.URL}},
	}})
	for range 20 {
		code, body, hdr := h.call(t.Context(), "")
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, "r2 POST")
		require.Equal(t, "2", hdr.Get(proxy.RevisionHeader), "the revision that answered")
	}
	require.Eventually(t, func() bool { return h.rep.total(2).Requests == 20 }, 5*time.Second, 10*time.Millisecond)
	require.Zero(t, h.rep.total(1).Requests+h.rep.total(2).Errors)
}

// A replica that drops the connection before answering (shutting down)
// costs no request either.
func TestDroppedConnectionsGoElsewhere(t *testing.T) {
	h := newHarness(t, proxy.Options{})
	live := replica(t, "r1", 0)
	dropping := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(dropping.Close)
	h.rt.set(proxy.Route{Targets: []proxy.Target{{Revision: 1, Weight: 100, URLs: []string{dropping.URL, live.URL}}}})
	for range 10 {
		code, body, _ := h.call(t.Context(), "")
		require.Equal(t, http.StatusOK, code, body)
	}
}

// Every replica the route lists went away (the old revision's, a moment
// after a blue-green promote, before the route says so): the request
// tries each once, then waits for the route to list a new replica.
// Found under load in integration/serving_test.go, where the retry went
// back and forth between two stopped replicas and answered 502.
func TestRequestWaitsForTheRouteWhenEveryReplicaWentAway(t *testing.T) {
	h := newHarness(t, proxy.Options{})
	var dead []string
	for range 3 {
		d := replica(t, "old", 0)
		d.Close()
		dead = append(dead, d.URL)
	}
	h.rt.set(proxy.Route{Targets: []proxy.Target{{Revision: 1, Weight: 100, URLs: dead}}})
	live := replica(t, "new", 0)
	go func() {
		time.Sleep(500 * time.Millisecond)
		h.rt.set(proxy.Route{Targets: []proxy.Target{{Revision: 2, Weight: 100, URLs: []string{live.URL}}}})
	}()
	code, body, hdr := h.call(t.Context(), "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "new POST")
	require.Equal(t, "2", hdr.Get(proxy.RevisionHeader))
}
