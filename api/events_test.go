package api

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/runstate"
)

type sse struct {
	name, id, data string
	comment        bool
}

// readEvents parses an SSE stream until it ends, sending each event.
func readEvents(t *testing.T, h *harness, lastID string) (*http.Response, <-chan sse) {
	t.Helper()
	req, _ := http.NewRequest("GET", h.srv.URL+runsPath+"/"+runID1+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+h.viewer)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	ch := make(chan sse, 100)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(res.Body)
		var ev sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" || ev.comment {
					ch <- ev
				}
				ev = sse{}
			case strings.HasPrefix(line, ":"):
				ev.comment = true
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return res, ch
}

func next(t *testing.T, ch <-chan sse) sse {
	t.Helper()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("stream ended early")
			}
			if ev.comment {
				continue
			}
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event")
		}
	}
}

func TestRunEvents(t *testing.T) {
	h := newHarness(t)
	run := runningRun(h)
	res, ch := readEvents(t, h, "")
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}

	// Snapshot: steps, then the run.
	ev := next(t, ch)
	var step gen.StepStatus
	if ev.name != "step" || ev.id != "3" || json.Unmarshal([]byte(ev.data), &step) != nil {
		t.Fatalf("first event %+v", ev)
	}
	wantStep := gen.StepStatus{Name: "prep", Kind: "container", State: gen.StepStateRUNNING,
		Attempts: &[]gen.Attempt{{Number: 1, State: gen.StepStateRUNNING, LogUrl: ptr(runsPath + "/" + runID1 + "/steps/prep/logs?attempt=1")}}}
	if diff := cmp.Diff(wantStep, step); diff != "" {
		t.Errorf("step event (-want +got), with its log URL:\n%s", diff)
	}
	ev = next(t, ch)
	var re gen.RunEvent
	if ev.name != "run" || json.Unmarshal([]byte(ev.data), &re) != nil || re.State != gen.RunStateRUNNING || re.Seq != 3 {
		t.Fatalf("second event %+v", ev)
	}

	// A step changes: only that step is sent.
	st := *run.Status
	st.Seq = 4
	st.Steps = []runstate.StepStatus{{Name: "prep", Kind: "container", State: runstate.StepSucceeded,
		Attempts: []runstate.Attempt{{Number: 1, State: runstate.StepSucceeded}}}}
	h.eng.setStatus(st)
	ev = next(t, ch)
	if ev.name != "step" || ev.id != "4" || !strings.Contains(ev.data, `"SUCCEEDED"`) {
		t.Fatalf("change event %+v", ev)
	}

	// A step cache hit reaches SSE with its source.
	st.Seq = 5
	st.Steps = append(st.Steps, runstate.StepStatus{Name: "fit", Kind: "container", State: runstate.StepCached,
		CacheKey: "k1", CachedFrom: &runstate.CacheSource{Run: "r0", Step: "fit", Attempt: 2}, Message: "reused from run r0 (step fit, attempt 2)"})
	h.eng.setStatus(st)
	ev = next(t, ch)
	if ev.name != "step" || ev.id != "5" || !strings.Contains(ev.data, `"state":"CACHED"`) ||
		!strings.Contains(ev.data, `"cacheKey":"k1","cachedFrom":{"run":"r0","step":"fit","attempt":2}`) {
		t.Fatalf("cache hit event %+v", ev)
	}

	// The run finishes (seen via the mirror): final run event, then EOF.
	st.Seq, st.State = 6, runstate.Succeeded
	h.eng.setStatus(st)
	run.State, run.Status = runstate.Succeeded, &st
	h.cat.setRun(run)
	ev = next(t, ch)
	if ev.name != "run" || ev.id != "6" || !strings.Contains(ev.data, `"state":"SUCCEEDED"`) {
		t.Fatalf("final event %+v", ev)
	}
	select {
	case extra, ok := <-ch:
		if ok {
			t.Fatalf("event after the end: %+v", extra)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream did not end after the terminal state")
	}

	// Reconnecting after the end: 204, so EventSource stops.
	r := h.do("GET", runsPath+"/"+runID1+"/events", h.viewer, nil, "Last-Event-ID", "6")
	wantStatus(t, r, http.StatusNoContent)
	// Without Last-Event-ID a finished run still yields its final state.
	res, ch = readEvents(t, h, "")
	if next(t, ch).name != "step" || next(t, ch).name != "step" || next(t, ch).name != "run" {
		t.Fatal("no snapshot of a finished run")
	}
}

func TestRunEventsKeepAliveAndResume(t *testing.T) {
	h := newHarness(t, WithKeepAlive(20*time.Millisecond), WithPollInterval(time.Hour))
	runningRun(h)
	// Resuming at the current seq: no snapshot, only keep-alives.
	_, ch := readEvents(t, h, "3")
	select {
	case ev := <-ch:
		if !ev.comment {
			t.Fatalf("resumed stream resent %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no keep-alive")
	}
}
