package api

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// DefaultStreamsPerToken bounds the event and log-follow streams one token
// may hold open at once.
const DefaultStreamsPerToken = 32

// statusHub shares one status poller per run among every stream that
// follows it (SSE events, log follows), so a thousand viewers of a run cost
// one Postgres read and one workflow query per poll interval, not a
// thousand. A poller starts with its first subscriber and stops with its
// last, or after delivering a terminal state.
type statusHub struct {
	interval time.Duration
	fetch    func(ctx context.Context, run catalog.Run) (catalog.Run, runstate.Status)
	polls    prometheus.Counter

	mu    sync.Mutex
	feeds map[string]*runFeed
}

type runFeed struct {
	subs   map[chan runstate.Status]struct{}
	cancel context.CancelFunc
}

// subscribe returns a channel receiving the run's latest status after each
// poll (older undelivered ones are dropped: streams send diffs of state) and
// a function that ends the subscription. The channel is closed when the run
// reaches a terminal state (after that state is delivered).
func (h *statusHub) subscribe(run catalog.Run) (<-chan runstate.Status, func()) {
	ch := make(chan runstate.Status, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.feeds[run.ID]
	if f == nil {
		ctx, cancel := context.WithCancel(context.Background())
		f = &runFeed{subs: map[chan runstate.Status]struct{}{}, cancel: cancel}
		h.feeds[run.ID] = f
		go h.poll(ctx, run, f)
	}
	f.subs[ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := f.subs[ch]; !ok {
			return // already closed by a terminal state
		}
		delete(f.subs, ch)
		if len(f.subs) == 0 {
			f.cancel()
			if h.feeds[run.ID] == f {
				delete(h.feeds, run.ID)
			}
		}
	}
}

func (h *statusHub) poll(ctx context.Context, run catalog.Run, f *runFeed) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.polls.Inc()
		var st runstate.Status
		run, st = h.fetch(ctx, run)
		if ctx.Err() != nil {
			return
		}
		terminal := st.State.Terminal()
		h.mu.Lock()
		for ch := range f.subs {
			select { // latest value wins
			case <-ch:
			default:
			}
			ch <- st
			if terminal {
				close(ch)
				delete(f.subs, ch)
			}
		}
		if terminal || len(f.subs) == 0 {
			f.cancel()
			if h.feeds[run.ID] == f {
				delete(h.feeds, run.ID)
			}
		}
		h.mu.Unlock()
		if terminal {
			return
		}
	}
}

// refresh is the hub's fetch: the row (for the mirrored fallback) and the
// live status.
func (s *server) refresh(ctx context.Context, run catalog.Run) (catalog.Run, runstate.Status) {
	if fresh, err := s.cat.GetRun(ctx, run.Project, run.ID); err == nil {
		run = fresh
	}
	return run, s.liveStatus(ctx, run)
}

// streamSlots counts the open streams of each token.
type streamSlots struct {
	limit int
	open  prometheus.Gauge
	mu    sync.Mutex
	n     map[string]int
}

// acquire takes a stream slot for the request's token, or answers 429.
func (s *server) acquireStream(ctx context.Context) (release func(), err error) {
	tok := principal(ctx)
	l := s.streams
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[tok.ID] >= l.limit {
		return nil, newProblem(ptTooManyStreams, "this token already has %d open event or log streams (the limit); close some, or retry later", l.limit).
			withHeader("Retry-After", retryAfterSeconds)
	}
	l.n[tok.ID]++
	l.open.Inc()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.n[tok.ID]--; l.n[tok.ID] <= 0 {
				delete(l.n, tok.ID)
			}
			l.open.Dec()
		})
	}, nil
}
