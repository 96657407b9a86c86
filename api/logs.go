package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// LogStore reads step attempt logs by byte offset.
type LogStore interface {
	ReadLog(ctx context.Context, key activities.LogKey, fromOffset int64, maxBytes int) ([]catalog.LogChunk, error)
}

const (
	hdrNextOffset  = "X-Atelier-Next-Offset"
	hdrLogComplete = "X-Atelier-Log-Complete"
)

// GetStepLogs serves one attempt's log from an offset: a page, or with
// follow=true a stream that ends when the attempt is over.
func (s *server) GetStepLogs(ctx context.Context, req gen.GetStepLogsRequestObject) (gen.GetStepLogsResponseObject, error) {
	params := req.Params
	run, err := s.getRun(ctx, req.Project, req.Run)
	if err != nil {
		return nil, err
	}
	st := s.liveStatus(ctx, run)
	item := -1
	if params.Item != nil {
		item = *params.Item
	}
	var attempt int
	wideOver := false // a wide step's item, recorded: its attempts are over
	entry, _, _ := findStep(st.Steps, req.Step, -1)
	if entry.Wide != nil && item >= 0 {
		attempt, wideOver, err = s.wideLogAttempt(ctx, st, entry, item, params.Attempt)
	} else {
		attempt, err = pickAttempt(st, req.Step, item, params.Attempt)
	}
	if err != nil {
		return nil, err
	}
	key := activities.LogKey{RunID: run.ID, Step: req.Step, Item: item, Attempt: attempt}
	offset := deref(params.Offset)
	if deref(params.Follow) {
		release, err := s.acquireStream(ctx)
		if err != nil {
			return nil, err
		}
		return logFollow{s: s, ctx: ctx, run: run, key: key, next: offset, release: release, wideItem: entry.Wide != nil && item >= 0}, nil
	}
	// Decided before reading: bytes of a finished attempt are all stored
	// before its status says so.
	over := wideOver || attemptOver(st, key)
	data, next, err := s.readLog(ctx, key, offset)
	if err != nil {
		return nil, internalError(err)
	}
	return logPage{data: data, next: next, complete: over && len(data) < s.logPage}, nil
}

const logContentType = "text/plain; charset=utf-8"

// logPage is a 200 of GetStepLogs without follow. (The generated text
// response would send Content-Type without its charset.)
type logPage struct {
	data     []byte
	next     int64
	complete bool
}

func (p logPage) VisitGetStepLogsResponse(w http.ResponseWriter) error {
	h := w.Header()
	h.Set(hdrNextOffset, strconv.FormatInt(p.next, 10))
	h.Set(hdrLogComplete, strconv.FormatBool(p.complete))
	h.Set(echo.HeaderContentType, logContentType)
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(p.data)
	return err
}

// pickAttempt defaults to the newest attempt and rejects steps, items and
// attempts that cannot exist. While the run is young its steps may not be
// listed yet, so unknown names are only rejected once something is known.
func pickAttempt(st runstate.Status, step string, item int, want *int) (int, error) {
	entry, stepFound, itemFound := findStep(st.Steps, step, item)
	if !stepFound {
		if len(st.Steps) > 0 || st.State.Terminal() {
			return 0, notFound("run %s has no step %q", st.RunID, step)
		}
		return derefOr(want, 1), nil
	}
	if !itemFound {
		if entry.State.Terminal() || st.State.Terminal() {
			return 0, notFound("step %q of run %s has no item %d", step, st.RunID, item)
		}
		return derefOr(want, 1), nil
	}
	newest := 0
	for _, a := range entry.Attempts {
		newest = max(newest, a.Number)
	}
	if want == nil {
		return max(newest, 1), nil
	}
	if *want > newest && (entry.State.Terminal() || st.State.Terminal()) {
		return 0, notFound("step %q of run %s has no attempt %d", step, st.RunID, *want)
	}
	return *want, nil
}

// findStep finds a step, or one forEach item of it when item >= 0.
func findStep(steps []runstate.StepStatus, name string, item int) (entry runstate.StepStatus, stepFound, itemFound bool) {
	for _, st := range steps {
		if st.Name != name {
			continue
		}
		if item < 0 {
			return st, true, true
		}
		if item < len(st.Items) {
			return st.Items[item], true, true
		}
		return st, true, false
	}
	return entry, false, false
}

// attemptOver reports whether the attempt will write no more log.
func attemptOver(st runstate.Status, key activities.LogKey) bool {
	if st.State.Terminal() {
		return true
	}
	entry, _, found := findStep(st.Steps, key.Step, key.Item)
	if !found {
		return false
	}
	for _, a := range entry.Attempts {
		if a.Number == key.Attempt {
			return a.State.Terminal()
		}
		if a.Number > key.Attempt {
			return true
		}
	}
	return entry.State.Terminal()
}

// logFollow is a 200 of GetStepLogs with follow=true: it streams until
// the attempt is over or the client leaves. The next offset goes in a
// trailer, since it is known only at the end.
type logFollow struct {
	s       *server
	ctx     context.Context // the request's: done when the client leaves
	run     catalog.Run
	key     activities.LogKey
	next    int64
	release func() // the token's stream slot
	// wideItem: the attempt is of a wide step's item, which is over once
	// recorded in Postgres (the status has no entry for it).
	wideItem bool
}

func (f logFollow) VisitGetStepLogsResponse(rw http.ResponseWriter) error {
	defer f.release()
	s, ctx, run, key, next := f.s, f.ctx, f.run, f.key, f.next
	// The attempt's end comes from the run's shared status poller; only
	// the log reads are per follower (each at its own offset).
	st := s.liveStatus(ctx, run)
	var updates <-chan runstate.Status
	if !st.State.Terminal() {
		var unsubscribe func()
		updates, unsubscribe = s.hub.subscribe(run)
		defer unsubscribe()
	}
	w := flushWriter{rw}
	h := w.Header()
	h.Set(echo.HeaderContentType, logContentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	h.Set("Trailer", hdrNextOffset+", "+hdrLogComplete)
	w.WriteHeader(http.StatusOK)
	w.Flush()

	complete := false
	defer func() {
		h.Set(hdrNextOffset, strconv.FormatInt(next, 10))
		h.Set(hdrLogComplete, strconv.FormatBool(complete))
	}()
	for {
		over := attemptOver(st, key) || (f.wideItem && s.wideItemOver(ctx, key))
		for {
			data, n, err := s.readLog(ctx, key, next)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Error("read log while following", zap.String("run", run.ID), zap.Error(err))
				}
				return nil
			}
			if len(data) > 0 {
				if _, err := w.Write(data); err != nil {
					return nil
				}
				w.Flush()
			}
			next = n
			if len(data) < s.logPage {
				break
			}
		}
		if over {
			complete = true
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case next, ok := <-updates:
			if ok {
				st = next
			} else {
				updates = nil // closed after the terminal state, already in st
			}
		case <-time.After(s.pollInterval):
		}
	}
}

// readLog joins the chunks from offset from; chunks may overlap the
// offset (stores cut logs at their own boundaries).
func (s *server) readLog(ctx context.Context, key activities.LogKey, from int64) ([]byte, int64, error) {
	chunks, err := s.cat.ReadLog(ctx, key, from, s.logPage)
	if err != nil {
		return nil, from, err
	}
	var out []byte
	next := from
	for _, ch := range chunks {
		start, data := ch.Offset, ch.Data
		end := start + int64(len(data))
		if end <= next {
			continue
		}
		if start < next {
			data = data[next-start:]
		}
		out = append(out, data...)
		next = end
	}
	return out, next, nil
}

func derefOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
