package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// StreamRunEvents sends run and step changes as server-sent events. It
// polls the status (live query, else the mirror) and sends what changed:
// simple, and correct across gateway restarts because events are diffs of
// state, not a log that could have gaps. Problems (404, 429) are decided
// here, before the stream's status line; eventStream writes the stream.
func (s *server) StreamRunEvents(ctx context.Context, req gen.StreamRunEventsRequestObject) (gen.StreamRunEventsResponseObject, error) {
	run, err := s.getRun(ctx, req.Project, req.Run)
	if err != nil {
		return nil, err
	}
	lastSeq := int64(-1)
	if v := deref(req.Params.LastEventID); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			lastSeq = n
		}
	}
	st := s.liveStatus(ctx, run)
	if st.State.Terminal() && lastSeq >= st.Seq {
		// The client saw the end; 204 stops EventSource reconnecting.
		return gen.StreamRunEvents204Response{}, nil
	}
	release, err := s.acquireStream(ctx)
	if err != nil {
		return nil, err
	}
	return eventStream{s: s, ctx: ctx, run: run, st: st, lastSeq: lastSeq, release: release}, nil
}

// eventStream is the 200 response of StreamRunEvents: it writes events
// and flushes each batch until the run ends or the client leaves.
type eventStream struct {
	s       *server
	ctx     context.Context // the request's: done when the client leaves
	run     catalog.Run
	st      runstate.Status
	lastSeq int64
	release func() // the token's stream slot
}

func (es eventStream) VisitStreamRunEventsResponse(rw http.ResponseWriter) error {
	defer es.release()
	s, ctx, st := es.s, es.ctx, es.st
	var updates <-chan runstate.Status
	if !st.State.Terminal() {
		var unsubscribe func()
		updates, unsubscribe = s.hub.subscribe(es.run)
		defer unsubscribe()
	}

	w := flushWriter{rw}
	w.Header().Set(echo.HeaderContentType, "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 3000\n\n"); err != nil {
		return nil
	}
	w.Flush()

	d := &differ{steps: map[string]string{}}
	// A client resuming at the current seq already has this state.
	quiet := es.lastSeq >= st.Seq
	keepAlive := time.NewTicker(s.keepAlive)
	defer keepAlive.Stop()
	for {
		for _, ev := range d.diff(st) {
			if quiet {
				continue
			}
			if _, err := fmt.Fprintf(w, "event: %s\nid: %d\ndata: %s\n\n", ev.name, st.Seq, ev.data); err != nil {
				return nil
			}
		}
		quiet = false
		w.Flush()
		if st.State.Terminal() {
			return nil
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-keepAlive.C:
				if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
					return nil
				}
				w.Flush()
			case next, ok := <-updates:
				if !ok {
					return nil // the terminal state was delivered before the close
				}
				st = next
				break wait
			}
		}
	}
}

// flushWriter flushes through to the client; echo's response writer is an
// http.Flusher.
type flushWriter struct{ http.ResponseWriter }

func (w flushWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

type event struct {
	name string
	data []byte
}

// differ remembers what was sent, to send only changes. Steps come first
// so the run event that reports a terminal state is the last one.
type differ struct {
	run   string
	steps map[string]string
}

func (d *differ) diff(st runstate.Status) []event {
	var out []event
	for _, step := range st.Steps {
		b, err := json.Marshal(stepView(step))
		if err != nil {
			continue
		}
		if d.steps[step.Name] != string(b) {
			d.steps[step.Name] = string(b)
			out = append(out, event{"step", b})
		}
	}
	// Seq moves with every step change; compare without it so a run event
	// means the run itself changed.
	ev := runEvent(st)
	ev.Seq = 0
	key, err := json.Marshal(ev)
	if err == nil && d.run != string(key) {
		d.run = string(key)
		if b, err := json.Marshal(runEvent(st)); err == nil {
			out = append(out, event{"run", b})
		}
	}
	return out
}
