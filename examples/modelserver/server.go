package modelserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"
)

// HeaderRevision carries Config.Revision on every response.
const HeaderRevision = "X-Model-Revision"

// maxBody bounds request bodies.
const maxBody = 8 << 20

var (
	errNotLoaded = errors.New("model is not loaded yet")
	errQueueFull = errors.New("request queue is full")
)

// Server is the fake model server. It is an http.Handler; it starts no
// listener of its own.
type Server struct {
	cfg       Config // immutable after New: names, clock, logger, callbacks
	mux       *http.ServeMux
	crashedCh chan struct{}
	crashOnce sync.Once
	done      chan struct{}
	closeOnce sync.Once

	mu          sync.Mutex
	loadedAt    time.Time // loaded once the clock reaches it, unless forced
	forced      *bool     // POST /admin/faults {"loaded": ...}
	serviceTime time.Duration
	concurrency int
	maxQueue    int
	errorRate   float64
	errorP      int64 // errorRate as the fraction errorP/errorQ
	errorQ      int64
	errorSeq    int64 // position in the failure pattern, 1..errorQ
	failNext    int
	failAfter   int // remaining answers before a crash; 0 = disarmed
	crashAt     time.Time
	crashCancel chan struct{}
	running     int
	queue       []*waiter
	nextID      uint64
	m           metrics
}

// New returns a server configured by cfg. It panics if cfg.Validate fails:
// a fixture with a typo in it should stop the test at once. Call Close when
// done, to stop the crash timer.
func New(cfg Config) *Server {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:         cfg,
		crashedCh:   make(chan struct{}),
		done:        make(chan struct{}),
		loadedAt:    cfg.Clock.Now().Add(cfg.StartupDelay),
		serviceTime: cfg.ServiceTime,
		concurrency: cfg.Concurrency,
		maxQueue:    cfg.MaxQueue,
		failAfter:   cfg.FailAfter,
		m:           newMetrics(),
	}
	s.setErrorRateLocked(cfg.ErrorRate)
	s.armCrashLocked(cfg.CrashAfter)
	s.mux = s.routes()
	cfg.Logger.Info("fake model server", "backend", cfg.Backend, "model", cfg.Model,
		"revision", cfg.Revision, "loaded_in", cfg.StartupDelay.String())
	return s
}

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	switch s.cfg.Backend {
	case BackendTriton:
		s.tritonRoutes(mux)
	default:
		s.vllmRoutes(mux)
	}
	if !s.cfg.NoMetricsRoute {
		mux.Handle("GET /metrics", s.MetricsHandler())
	}
	mux.HandleFunc("GET /admin/faults", s.getFaults)
	mux.HandleFunc("POST /admin/faults", s.postFaults)
	return mux
}

// ServeHTTP implements http.Handler. After an injected crash every request
// is aborted (the client sees the connection drop), which requires a real
// net/http server such as httptest.NewServer, not a ResponseRecorder.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.abortIfCrashed()
	if s.cfg.Revision != "" {
		w.Header().Set(HeaderRevision, s.cfg.Revision)
	}
	if s.cfg.WeightsDigest != "" {
		w.Header().Set(HeaderWeights, s.cfg.WeightsDigest)
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	s.mux.ServeHTTP(w, r)
}

// Close stops the crash timer. It does not touch in-flight requests; shut
// the http.Server down for that.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.done) })
}

// Crashed is closed when an injected crash happens.
func (s *Server) Crashed() <-chan struct{} { return s.crashedCh }

// Stats is a consistent snapshot of the server's state, for in-process
// tests.
type Stats struct {
	Loaded    bool
	Running   int
	Waiting   int
	Succeeded uint64 // answered 200
	Failed    uint64 // answered 500 by fault injection
	Rejected  uint64 // answered 429 because the queue was full
}

// Stats returns a snapshot.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{
		Loaded:    s.loadedLocked(),
		Running:   s.running,
		Waiting:   len(s.queue),
		Succeeded: s.m.succeeded(),
		Failed:    s.m.failed,
		Rejected:  s.m.rejected,
	}
}

// Loaded reports whether the model counts as loaded (ready).
func (s *Server) Loaded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loadedLocked()
}

func (s *Server) loadedLocked() bool {
	if s.forced != nil {
		return *s.forced
	}
	return !s.cfg.Clock.Now().Before(s.loadedAt)
}

func (s *Server) abortIfCrashed() {
	select {
	case <-s.crashedCh:
		// Aborts the connection without a response, as a dead process would.
		panic(http.ErrAbortHandler)
	default:
	}
}

func (s *Server) crash(reason string) {
	s.crashOnce.Do(func() {
		s.cfg.Logger.Error("injected crash", "reason", reason)
		close(s.crashedCh)
		if s.cfg.OnCrash != nil {
			s.cfg.OnCrash(reason)
		}
	})
}

// armCrashLocked replaces the crash timer: a crash d from now, or none if
// d <= 0. The clock's timer is taken here, synchronously, so that a fake
// clock advanced right after sees it.
func (s *Server) armCrashLocked(d time.Duration) {
	if s.crashCancel != nil {
		close(s.crashCancel)
		s.crashCancel = nil
	}
	s.crashAt = time.Time{}
	if d <= 0 {
		return
	}
	s.crashAt = s.cfg.Clock.Now().Add(d)
	cancel := make(chan struct{})
	s.crashCancel = cancel
	fire := s.cfg.Clock.After(d)
	go func() {
		select {
		case <-fire:
			// fire and cancel may both be ready: only the timer in force
			// crashes.
			s.mu.Lock()
			current := s.crashCancel == cancel
			s.mu.Unlock()
			if current {
				s.crash(fmt.Sprintf("crash-after %s elapsed", d))
			}
		case <-cancel:
		case <-s.done:
		}
	}()
}

func (s *Server) setErrorRateLocked(rate float64) {
	s.errorRate = rate
	s.errorP, s.errorQ = ratio(rate, 10000)
	s.errorSeq = 0
}

// ratio returns p/q, the continued-fraction convergent of x in [0, 1] with
// the largest q <= maxQ, so that rates such as 1/3 or 0.1 give an exact
// integer pattern.
func ratio(x float64, maxQ int64) (p, q int64) {
	if x <= 0 {
		return 0, 1
	}
	if x >= 1 {
		return 1, 1
	}
	h0, h1, k0, k1 := int64(0), int64(1), int64(1), int64(0)
	for f := x; ; {
		a := int64(math.Floor(f))
		h2, k2 := a*h1+h0, a*k1+k0
		if k2 > maxQ {
			break
		}
		h0, h1, k0, k1 = h1, h2, k1, k2
		frac := f - float64(a)
		if frac < 1e-9 {
			break
		}
		f = 1 / frac
	}
	return h1, k1
}

// waiter is one queued request. ready is closed, and granted set, under
// s.mu when it gets a running slot.
type waiter struct {
	ready   chan struct{}
	granted bool
}

// ticket is a request holding a running slot.
type ticket struct {
	id      uint64
	arrived time.Time
	started time.Time
	fail    bool // answer 500 (fault injection)
}

// acquire takes a running slot for an inference request: 503 before the
// model is loaded, a FIFO wait when all slots are busy, 429 when the FIFO
// is full, then the service time. On success the caller must call finish.
// A nil ticket with a nil error means the client went away.
func (s *Server) acquire(ctx context.Context) (*ticket, error) {
	s.mu.Lock()
	if !s.loadedLocked() {
		s.mu.Unlock()
		return nil, errNotLoaded
	}
	s.nextID++
	t := &ticket{id: s.nextID, arrived: s.cfg.Clock.Now()}
	if s.running < s.concurrency && len(s.queue) == 0 {
		s.running++
	} else {
		if s.maxQueue > 0 && len(s.queue) >= s.maxQueue {
			s.m.rejected++
			s.mu.Unlock()
			return nil, errQueueFull
		}
		w := &waiter{ready: make(chan struct{})}
		s.queue = append(s.queue, w)
		s.mu.Unlock()
		select {
		case <-w.ready:
		case <-s.crashedCh:
			panic(http.ErrAbortHandler)
		case <-ctx.Done():
			s.mu.Lock()
			if w.granted {
				s.releaseLocked()
			} else {
				s.removeLocked(w)
			}
			s.mu.Unlock()
			return nil, nil
		}
		s.mu.Lock()
	}
	t.started = s.cfg.Clock.Now()
	t.fail = s.decideFailLocked()
	serviceTime := s.serviceTime
	s.mu.Unlock()

	if serviceTime > 0 {
		select {
		case <-s.cfg.Clock.After(serviceTime):
		case <-s.crashedCh:
			panic(http.ErrAbortHandler)
		case <-ctx.Done():
			s.mu.Lock()
			s.releaseLocked()
			s.mu.Unlock()
			return nil, nil
		}
	}
	return t, nil
}

func (s *Server) decideFailLocked() bool {
	if s.failNext > 0 {
		s.failNext--
		return true
	}
	if s.errorP == 0 {
		return false
	}
	// The pattern repeats every errorQ requests.
	s.errorSeq = s.errorSeq%s.errorQ + 1
	k := s.errorSeq
	return k*s.errorP/s.errorQ > (k-1)*s.errorP/s.errorQ
}

func (s *Server) releaseLocked() {
	s.running--
	s.dispatchLocked()
}

// dispatchLocked hands free running slots to the head of the FIFO.
func (s *Server) dispatchLocked() {
	for s.running < s.concurrency && len(s.queue) > 0 {
		w := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		w.granted = true
		s.running++
		close(w.ready)
	}
}

func (s *Server) removeLocked(w *waiter) {
	for i, q := range s.queue {
		if q == w {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			return
		}
	}
}

// outcome is what a finished request adds to the metrics.
type outcome struct {
	ok           bool
	finishReason string // vLLM: stop or length
	promptTokens int
	genTokens    int
}

// finish releases t's slot and records its outcome in one step, so that a
// scrape never sees a request neither running nor counted. It reports
// whether the server must now crash (fail-after reached); the caller then
// writes its response and calls crash.
func (s *Server) finish(t *ticket, o outcome) (crash bool) {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
	s.m.record(o, t.started.Sub(t.arrived), now.Sub(t.arrived))
	if s.failAfter > 0 {
		s.failAfter--
		return s.failAfter == 0
	}
	return false
}

// respond writes v as JSON with the given status.
func respond(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// answer writes the response of a finished request, then crashes the server
// if finish said so, after flushing the response to the client.
func (s *Server) answer(w http.ResponseWriter, status int, v any, crash bool) {
	respond(w, status, v)
	if crash {
		_ = http.NewResponseController(w).Flush()
		s.crash("fail-after: answered the last request allowed before the crash")
	}
}

func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}
