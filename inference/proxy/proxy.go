package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
)

// ErrNotFound is what a Resolver answers for an endpoint that does not
// exist (or was deleted).
var ErrNotFound = errors.New("endpoint not found")

// Target is one revision the proxy may send requests to.
type Target struct {
	Revision int
	// Weight is the revision's share of traffic (0–100).
	Weight int
	// URLs are the revision's ready replicas' base URLs (or one balanced
	// address); empty while none is ready.
	URLs []string
}

// Route is where an endpoint's requests go.
type Route struct {
	Targets []Target
}

// Resolver finds an endpoint's route (the endpoint's workflow status).
type Resolver interface {
	Resolve(ctx context.Context, project, endpoint string) (Route, error)
}

// Report is what the proxy tells an endpoint's workflow: how many
// requests it holds now, and the traffic per revision since its last
// report.
type Report struct {
	Held      int
	Revisions []inference.RevisionTraffic
}

// Reporter delivers reports (a signal to the endpoint's workflow).
type Reporter interface {
	Report(ctx context.Context, project, endpoint string, r Report) error
}

// RevisionHeader pins a request to a revision (a blue-green preview at
// 0% traffic, say) and, on responses, names the revision that answered.
const RevisionHeader = "X-Atelier-Revision"

// Defaults.
const (
	DefaultMaxHeld     = 100
	DefaultMaxHold     = 5 * time.Minute
	DefaultRouteTTL    = time.Second
	DefaultReportEvery = time.Second
	// holdPoll is how often a held request looks for a ready replica.
	holdPoll = 250 * time.Millisecond
	// retryAfter is the Retry-After of a refused request, in seconds.
	retryAfter = 5
)

// Options tune a Proxy; zero values take the defaults.
type Options struct {
	// MaxHeld bounds the requests one endpoint holds while it wakes;
	// further ones are refused with 429 and Retry-After.
	MaxHeld int
	// MaxHold bounds how long a request is held (its own deadline may be
	// shorter).
	MaxHold time.Duration
	// RouteTTL is how long a resolved route is reused.
	RouteTTL time.Duration
	// ReportEvery is how often traffic is reported while there is some.
	ReportEvery time.Duration
	Transport   http.RoundTripper
	Log         *zap.Logger
	// Metrics, when set, receives telemetry.EndpointRequests and
	// …RequestDuration (with endpoint and revision labels when its
	// TenantLabels is on).
	Metrics *telemetry.Metrics
}

// Proxy forwards requests to endpoints' replicas.
type Proxy struct {
	resolve  Resolver
	reporter Reporter
	opts     Options
	rp       *httputil.ReverseProxy

	mu        sync.Mutex
	endpoints map[key]*endpointState

	requests *prometheus.CounterVec   // nil without Options.Metrics
	latency  *prometheus.HistogramVec // idem
}

type key struct{ project, endpoint string }

// endpointState is the proxy's view of one endpoint: its cached route,
// held requests and traffic not yet reported.
type endpointState struct {
	route     Route
	routeAt   time.Time
	held      int
	traffic   map[int]*inference.RevisionTraffic
	reporting bool
	sentHeld  int
	turn      map[int]int // per revision: the next of its URLs
}

// New builds a proxy. It fails only when its metrics cannot be
// registered on o.Metrics.
func New(r Resolver, rep Reporter, o Options) (*Proxy, error) {
	if o.MaxHeld <= 0 {
		o.MaxHeld = DefaultMaxHeld
	}
	if o.MaxHold <= 0 {
		o.MaxHold = DefaultMaxHold
	}
	if o.RouteTTL <= 0 {
		o.RouteTTL = DefaultRouteTTL
	}
	if o.ReportEvery <= 0 {
		o.ReportEvery = DefaultReportEvery
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	p := &Proxy{resolve: r, reporter: rep, opts: o, endpoints: map[key]*endpointState{}}
	p.rp = &httputil.ReverseProxy{
		Rewrite:      rewrite,
		ErrorHandler: p.upstreamError,
		// Streamed completions (server-sent events) reach the client as
		// they are generated.
		FlushInterval: -1,
	}
	p.rp.Transport = retrying{p: p, next: o.Transport}
	if m := o.Metrics; m != nil {
		var err error
		if p.requests, err = telemetry.Register(m.Registry, telemetry.EndpointRequests.NewCounterVec(m.TenantLabels)); err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		if p.latency, err = telemetry.Register(m.Registry, telemetry.EndpointRequestDuration.NewHistogramVec(m.TenantLabels)); err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
	}
	return p, nil
}

// forward is one request's journey, carried in its context: where it
// goes (rewrite), and where it went after a retry (retrying), for the
// response's revision header and the counts.
type forward struct {
	key  key
	pin  int
	base *url.URL
	path string
	rev  int
}

type forwardKey struct{}

// rewrite points the outgoing request at the chosen replica. The
// caller's Atelier token is not forwarded: the engine runs user code.
func rewrite(pr *httputil.ProxyRequest) {
	f := pr.In.Context().Value(forwardKey{}).(*forward)
	pr.SetURL(f.base)
	pr.Out.URL.Path = f.path
	pr.Out.URL.RawPath = ""
	pr.Out.Header.Del("Authorization")
	pr.Out.Header.Del(RevisionHeader)
	pr.SetXForwarded()
}

// Error is a request the proxy answers itself (no replica answered).
type Error struct {
	Status     int
	Message    string
	RetryAfter int // seconds; 0: none
}

func (e *Error) Error() string { return e.Message }

// Serve forwards r to the endpoint's replicas, at path (the part after
// the endpoint's prefix, e.g. "/v1/chat/completions"). While no replica is
// ready it holds the request (the endpoint is woken by the report), up to
// MaxHold and the request's own deadline. It returns an *Error, without
// writing, when it cannot forward: the caller writes it in its own format.
func (p *Proxy) Serve(w http.ResponseWriter, r *http.Request, project, endpoint, path string) (err error) {
	ctx := r.Context()
	begin := time.Now()
	k := key{project, endpoint}
	st, err := p.state(ctx, k)
	if err != nil {
		return err // not counted: the endpoint may not exist (any name a client sends)
	}
	rev, status := 0, 0
	defer func() { p.observe(k, rev, status, err, time.Since(begin)) }()
	pin, err := pinned(r)
	if err != nil {
		return err
	}
	t, base, ok := p.pick(st, pin)
	if !ok {
		if t, base, err = p.hold(ctx, k, st, pin); err != nil {
			return err
		}
	}
	u, err := url.Parse(base)
	if err != nil {
		return &Error{Status: http.StatusBadGateway, Message: fmt.Sprintf("revision %d has a bad address %q", t, base)}
	}
	f := &forward{key: k, pin: pin, base: u, path: path, rev: t}
	rec := &recorder{ResponseWriter: w}
	start := time.Now()
	p.rp.ServeHTTP(rec, r.WithContext(context.WithValue(ctx, forwardKey{}, f)))
	rev, status = f.rev, rec.status()
	p.count(k, f.rev, time.Since(start), status)
	return nil
}

// observe records a request to an existing endpoint in the Prometheus
// metrics: forwarded (status from the replica), or answered by the proxy
// itself (err's status: held too long, too many held, …).
func (p *Proxy) observe(k key, rev, status int, err error, d time.Duration) {
	if p.requests == nil {
		return
	}
	if err != nil {
		status = http.StatusInternalServerError
		var pe *Error
		if errors.As(err, &pe) {
			status = pe.Status
		}
	}
	labels := []string{fmt.Sprintf("%dxx", status/100)}
	if p.opts.Metrics.TenantLabels {
		r := ""
		if rev > 0 {
			r = strconv.Itoa(rev)
		}
		labels = append(labels, k.project+"/"+k.endpoint, r)
	}
	p.requests.WithLabelValues(labels...).Inc()
	p.latency.WithLabelValues(labels...).Observe(d.Seconds())
}

// maxRedirects bounds how many other replicas a refused request tries;
// redirectWait bounds how long it waits for the route to list a replica
// it has not tried (a revision's replicas can all stop at once, e.g. the
// old one after a blue-green promote, a moment before the route says so),
// re-reading the route every redirectPoll.
const (
	maxRedirects = 8
	redirectWait = 10 * time.Second
	redirectPoll = 200 * time.Millisecond
)

// retrying sends a request again, to another replica, when its replica
// went away before answering (see unsent): it was stopped (a rollout
// removed its revision, the autoscaler scaled down) a moment before the
// route said so. Once any of the answer has arrived nothing is retried.
type retrying struct {
	p    *Proxy
	next http.RoundTripper
}

// unsent reports whether err says the replica went away before it
// answered anything: the connection was refused, or a kept-alive
// connection was closed or reset (or broke while the request was being
// written: EPIPE) by a replica that is shutting down
// (net/http retries those by itself only for idempotent methods). A
// reset may also come from an engine that crashed while working on the
// request, so a request may, rarely, run twice; for inference that is a
// cost, not a wrong answer, and it is what Envoy's "reset" retry policy
// does too.
func unsent(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

func (t retrying) RoundTrip(req *http.Request) (*http.Response, error) {
	f, _ := req.Context().Value(forwardKey{}).(*forward)
	var tried []string // replicas that went away under this request
	for i := 0; ; i++ {
		res, err := t.next.RoundTrip(req)
		if err == nil || f == nil || i == maxRedirects || !unsent(err) || (req.Body != nil && req.Body != http.NoBody && req.GetBody == nil) {
			if err == nil && f != nil {
				res.Header.Set(RevisionHeader, strconv.Itoa(f.rev))
			}
			return res, err
		}
		tried = append(tried, req.URL.Scheme+"://"+req.URL.Host)
		rev, base, ok := t.p.retarget(req.Context(), f, tried)
		if !ok {
			return nil, err
		}
		u, perr := url.Parse(base)
		if perr != nil {
			return nil, err
		}
		req = req.Clone(req.Context())
		req.URL.Scheme, req.URL.Host = u.Scheme, u.Host
		if req.GetBody != nil {
			if req.Body, perr = req.GetBody(); perr != nil {
				return nil, err
			}
		}
		f.rev = rev
	}
}

// retarget picks a replica for a request whose replicas in tried went
// away, re-reading the route until it lists another one (at most
// redirectWait, or the request's own deadline).
func (p *Proxy) retarget(ctx context.Context, f *forward, tried []string) (int, string, bool) {
	deadline := time.Now().Add(redirectWait)
	for {
		if st, err := p.refresh(ctx, f.key); err == nil {
			if rev, base, ok := p.pickAvoiding(st, f.pin, tried...); ok {
				return rev, base, true
			}
		}
		if time.Now().After(deadline) {
			return 0, "", false
		}
		select {
		case <-ctx.Done():
			return 0, "", false
		case <-time.After(redirectPoll):
		}
	}
}

// pinned reads the revision a request asks for (0: any).
func pinned(r *http.Request) (int, error) {
	v := r.Header.Get(RevisionHeader)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("%s must be a revision number, got %q", RevisionHeader, v)}
	}
	return n, nil
}

// state returns the endpoint's state with a route no older than RouteTTL.
func (p *Proxy) state(ctx context.Context, k key) (*endpointState, error) {
	p.mu.Lock()
	st := p.endpoints[k]
	fresh := st != nil && time.Since(st.routeAt) < p.opts.RouteTTL
	p.mu.Unlock()
	if fresh {
		return st, nil
	}
	return p.refresh(ctx, k)
}

// refresh resolves the route again.
func (p *Proxy) refresh(ctx context.Context, k key) (*endpointState, error) {
	route, err := p.resolve.Resolve(ctx, k.project, k.endpoint)
	if errors.Is(err, ErrNotFound) {
		return nil, &Error{Status: http.StatusNotFound, Message: fmt.Sprintf("endpoint %q not found in project %q", k.endpoint, k.project)}
	}
	if err != nil {
		return nil, &Error{Status: http.StatusServiceUnavailable, Message: "cannot read the endpoint's state: " + err.Error(), RetryAfter: retryAfter}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.endpoints[k]
	if st == nil {
		st = &endpointState{traffic: map[int]*inference.RevisionTraffic{}, turn: map[int]int{}}
		p.endpoints[k] = st
	}
	st.route, st.routeAt = route, time.Now()
	return st, nil
}

// pick chooses a revision by weight among those with ready replicas (or
// the pinned one), then one of its URLs in turn.
func (p *Proxy) pick(st *endpointState, pin int) (int, string, bool) {
	return p.pickAvoiding(st, pin)
}

// pickAvoiding is pick without the URLs in avoid (replicas that just
// refused a connection, which a route a moment old may still list).
func (p *Proxy) pickAvoiding(st *endpointState, pin int, avoid ...string) (int, string, bool) {
	p.mu.Lock()
	route := st.route
	p.mu.Unlock()
	var ready []Target
	total := 0
	for _, t := range route.Targets {
		if len(avoid) > 0 {
			t.URLs = slices.DeleteFunc(slices.Clone(t.URLs), func(u string) bool { return slices.Contains(avoid, u) })
		}
		if len(t.URLs) == 0 {
			continue
		}
		if pin != 0 {
			if t.Revision == pin {
				ready, total = []Target{t}, 1
				break
			}
			continue
		}
		if t.Weight > 0 {
			ready = append(ready, t)
			total += t.Weight
		}
	}
	if len(ready) == 0 {
		return 0, "", false
	}
	chosen := ready[0]
	if len(ready) > 1 {
		n := rand.IntN(total)
		for _, t := range ready {
			if n < t.Weight {
				chosen = t
				break
			}
			n -= t.Weight
		}
	}
	p.mu.Lock()
	i := st.turn[chosen.Revision] % len(chosen.URLs)
	st.turn[chosen.Revision] = i + 1
	p.mu.Unlock()
	return chosen.Revision, chosen.URLs[i], true
}

// hold waits for a ready replica: the endpoint is scaled from zero, or
// its replicas are all starting. The held count reaches the endpoint's
// workflow at once (it is the 0→1 signal) and while the hold lasts.
func (p *Proxy) hold(ctx context.Context, k key, st *endpointState, pin int) (int, string, error) {
	p.mu.Lock()
	if st.held >= p.opts.MaxHeld {
		p.mu.Unlock()
		return 0, "", &Error{Status: http.StatusTooManyRequests, RetryAfter: retryAfter,
			Message: fmt.Sprintf("endpoint %q is starting and already holds %d requests; retry later", k.endpoint, st.held)}
	}
	st.held++
	p.startReporting(k, st)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		st.held--
		p.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ctx, p.opts.MaxHold)
	defer cancel()
	tick := time.NewTicker(holdPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			what := "no replica"
			if pin != 0 {
				what = fmt.Sprintf("no replica of revision %d", pin)
			}
			return 0, "", &Error{Status: http.StatusServiceUnavailable, RetryAfter: retryAfter,
				Message: fmt.Sprintf("%s of endpoint %q became ready within %s", what, k.endpoint, p.opts.MaxHold)}
		case <-tick.C:
		}
		if _, err := p.refresh(ctx, k); err != nil {
			var pe *Error
			if errors.As(err, &pe) && pe.Status == http.StatusNotFound {
				return 0, "", err
			}
			continue // a transient error: keep holding
		}
		if t, base, ok := p.pick(st, pin); ok {
			return t, base, nil
		}
	}
}

// count records one forwarded request.
func (p *Proxy) count(k key, rev int, d time.Duration, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.endpoints[k]
	if st == nil {
		return
	}
	t := st.traffic[rev]
	if t == nil {
		t = &inference.RevisionTraffic{Revision: rev}
		st.traffic[rev] = t
	}
	t.Requests++
	if status >= 500 {
		t.Errors++
	}
	t.Latency.Observe(d)
	p.startReporting(k, st)
}

// startReporting runs one reporting loop per endpoint while it has
// something to report; p.mu is held.
func (p *Proxy) startReporting(k key, st *endpointState) {
	if st.reporting {
		return
	}
	st.reporting = true
	go p.reportLoop(k, st)
}

// reportLoop sends the endpoint's held count and traffic: at once (a held
// request is the wake-up call), then every ReportEvery until there is
// nothing new to say.
func (p *Proxy) reportLoop(k key, st *endpointState) {
	for first := true; ; first = false {
		if !first {
			time.Sleep(p.opts.ReportEvery)
		}
		p.mu.Lock()
		r := Report{Held: st.held}
		for _, t := range st.traffic {
			r.Revisions = append(r.Revisions, *t)
		}
		clear(st.traffic)
		if len(r.Revisions) == 0 && r.Held == st.sentHeld {
			st.reporting = false
			p.mu.Unlock()
			return
		}
		st.sentHeld = r.Held
		p.mu.Unlock()
		sortTraffic(r.Revisions)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := p.reporter.Report(ctx, k.project, k.endpoint, r); err != nil {
			// Lost figures only shrink a gate's sample: never a false
			// verdict (see TrafficGates).
			p.opts.Log.Warn("cannot report endpoint traffic", zap.String("project", k.project), zap.String("endpoint", k.endpoint), zap.Error(err))
		}
		cancel()
	}
}

// upstreamError answers a replica that could not be reached. It counts
// as an error of the revision (recorder.status sees the 502).
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		w.WriteHeader(499) // the client went away; nginx's convention
		return
	}
	p.opts.Log.Warn("endpoint replica did not answer", zap.String("url", r.URL.String()), zap.Error(err))
	if f, ok := r.Context().Value(forwardKey{}).(*forward); ok {
		w.Header().Set(RevisionHeader, strconv.Itoa(f.rev))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusBadGateway)
	_, _ = fmt.Fprintf(w, `{"type":"about:blank","title":"Bad Gateway","status":502,"detail":%q}`, "the endpoint's replica did not answer: "+err.Error())
}
