package modelserver

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/schema"
)

func TestFaultsEndpointChangesBehaviour(t *testing.T) {
	// Each step posts a faults body, then sends requests and expects their
	// statuses in order.
	type step struct {
		faults string
		want   []int
	}
	tests := []struct {
		name    string
		backend Backend
		steps   []step
	}{
		{"5xx burst mid-rollout and recovery", BackendVLLM, []step{
			{"", []int{200, 200}},
			{`{"error_rate":1}`, []int{500, 500, 500}},
			{`{"error_rate":0}`, []int{200, 200}},
		}},
		{"error rate restarts its pattern", BackendTriton, []step{
			{`{"error_rate":0.5}`, []int{200, 500, 200}},
			{`{"error_rate":0.5}`, []int{200, 500}},
		}},
		{"fail_next is a burst before the rate resumes", BackendVLLM, []step{
			{`{"fail_next":2,"error_rate":0.5}`, []int{500, 500, 200, 500, 200}},
		}},
		{"forced unready and back", BackendTriton, []step{
			{`{"loaded":false}`, []int{503}},
			{`{"loaded":true}`, []int{200}},
		}},
		{"reload: startup delay from now", BackendVLLM, []step{
			{`{"startup_delay":"1h"}`, []int{503}},
			{`{"startup_delay":"0s"}`, []int{200}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := start(t, Config{Backend: tt.backend})
			path, body := inferPath(tt.backend)
			for i, s := range tt.steps {
				if s.faults != "" {
					if r := f.do(t, "POST", "/admin/faults", s.faults); r.status != http.StatusOK {
						t.Fatalf("step %d: POST /admin/faults %s: %d %s", i, s.faults, r.status, r.body)
					}
				}
				for j, want := range s.want {
					if got := f.do(t, "POST", path, body).status; got != want {
						t.Errorf("step %d request %d: %d, want %d", i, j, got, want)
					}
				}
			}
		})
	}
}

func TestFaultsReadinessProbes(t *testing.T) {
	f := start(t, Config{})
	if _, err := PostFaults(context.Background(), nil, f.url, Faults{Loaded: new(false)}); err != nil {
		t.Fatal(err)
	}
	if got := f.do(t, "GET", "/v1/models", "").status; got != 503 {
		t.Errorf("models while unloaded: %d", got)
	}
	if got := f.do(t, "GET", "/health", "").status; got != 200 {
		t.Errorf("health while unloaded: %d", got)
	}
	st, err := PostFaults(context.Background(), nil, f.url, Faults{StartupDelay: new(schema.Duration(time.Minute))})
	if err != nil {
		t.Fatal(err)
	}
	if st.Loaded {
		t.Error("loaded right after a reload")
	}
	f.clock.Advance(time.Minute)
	if got := f.do(t, "GET", "/v1/models", "").status; got != 200 {
		t.Errorf("models after the reload delay: %d", got)
	}
}

func TestFaultsResizeTheQueue(t *testing.T) {
	f := start(t, Config{Concurrency: 1, ServiceTime: time.Second})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { _, _ = send("POST", f.url+"/v1/completions", `{"prompt":"x"}`) })
	}
	f.waitState(t, 1, 2, 1)

	// A bounded queue turns the next request away.
	if _, err := f.SetFaults(Faults{MaxQueue: new(2)}); err != nil {
		t.Fatal(err)
	}
	if got := f.do(t, "POST", "/v1/completions", `{"prompt":"x"}`).status; got != 429 {
		t.Errorf("past max_queue: %d", got)
	}
	// More slots start the queued requests at once.
	st, err := f.SetFaults(Faults{Concurrency: new(3), ServiceTime: new(schema.Duration(2 * time.Second))})
	if err != nil {
		t.Fatal(err)
	}
	if st.Running != 3 || st.Waiting != 0 {
		t.Errorf("after raising concurrency: running %d waiting %d", st.Running, st.Waiting)
	}
	f.waitState(t, 3, 0, 3)
	f.clock.Advance(time.Second) // the first request's 1s
	f.waitState(t, 2, 0, 2)
	f.clock.Advance(time.Second) // the others' 2s
	wg.Wait()
	if st := f.Stats(); st.Succeeded != 3 || st.Rejected != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestFaultsEndpointValidates(t *testing.T) {
	f := start(t, Config{ErrorRate: 0.2})
	for _, body := range []string{
		`{"error_rate":1.5}`,
		`{"error_rate":-0.1}`,
		`{"concurrency":0}`,
		`{"max_queue":-1}`,
		`{"fail_next":-1}`,
		`{"fail_after":-2}`,
		`{"service_time":"-1s"}`,
		`{"crash_after":"-1s"}`,
		`{"service_time":5}`,
		`{"service_time":"soon"}`,
		`{"error_rat":1}`, // typo: rejected, not ignored
		`not json`,
	} {
		r := f.do(t, "POST", "/admin/faults", body)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"error"`) {
			t.Errorf("POST %s: %d %s", body, r.status, r.body)
		}
	}
	st := decode[FaultState](t, f.do(t, "GET", "/admin/faults", ""))
	if st.ErrorRate != 0.2 || st.Concurrency != 4 || st.Backend != BackendVLLM || !st.CrashAt.IsZero() {
		t.Errorf("a rejected body changed the state: %+v", st)
	}
	if _, err := f.SetFaults(Faults{Concurrency: new(0)}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("SetFaults error %v, want ErrInvalidConfig", err)
	}
	if _, err := PostFaults(context.Background(), nil, f.url, Faults{ErrorRate: new(2.0)}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("PostFaults error %v", err)
	}
}

func TestFaultStateRoundTrip(t *testing.T) {
	f := start(t, Config{Backend: BackendTriton, Model: "m", Revision: "r", ServiceTime: 250 * time.Millisecond, MaxQueue: 7})
	st, err := PostFaults(context.Background(), nil, f.url, Faults{ErrorRate: new(0.1), FailNext: new(3), FailAfter: new(9)})
	if err != nil {
		t.Fatal(err)
	}
	want := FaultState{Backend: BackendTriton, Model: "m", Revision: "r", Loaded: true, ErrorRate: 0.1, FailNext: 3,
		ServiceTime: schema.Duration(250 * time.Millisecond), Concurrency: 4, MaxQueue: 7, FailAfter: 9}
	if st != want {
		t.Errorf("state\n got %+v\nwant %+v", st, want)
	}
	if got := decode[FaultState](t, f.do(t, "GET", "/admin/faults", "")); got != want {
		t.Errorf("GET state %+v", got)
	}
}
