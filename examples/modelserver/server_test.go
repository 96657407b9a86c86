package modelserver

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/schema"
)

func TestReadinessFlipsAfterStartupDelay(t *testing.T) {
	type probe struct {
		method, path, body string
		before, after      int
	}
	tests := []struct {
		backend Backend
		probes  []probe
	}{
		{BackendVLLM, []probe{
			{"GET", "/health", "", 200, 200}, // up while loading, like vLLM
			{"GET", "/v1/models", "", 503, 200},
			{"POST", "/v1/completions", `{"prompt":"hi"}`, 503, 200},
			{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, 503, 200},
			{"GET", "/metrics", "", 200, 200},
		}},
		{BackendTriton, []probe{
			{"GET", "/v2/health/live", "", 200, 200},
			{"GET", "/v2/health/ready", "", 503, 200},
			{"GET", "/v2/models/fake-model/ready", "", 503, 200},
			{"GET", "/v2/models/fake-model/versions/1/ready", "", 503, 200},
			{"POST", "/v2/models/fake-model/infer", `{"inputs":[{"name":"I","shape":[1],"datatype":"FP32","data":[1]}]}`, 503, 200},
			{"GET", "/metrics", "", 200, 200},
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.backend), func(t *testing.T) {
			const delay = 30 * time.Second
			f := start(t, Config{Backend: tt.backend, StartupDelay: delay})
			check := func(phase string, want func(probe) int) {
				t.Helper()
				for _, p := range tt.probes {
					if got := f.do(t, p.method, p.path, p.body).status; got != want(p) {
						t.Errorf("%s: %s %s = %d, want %d", phase, p.method, p.path, got, want(p))
					}
				}
			}
			check("at start", func(p probe) int { return p.before })
			f.clock.Advance(delay - time.Nanosecond)
			check("just before the delay", func(p probe) int { return p.before })
			if f.Loaded() {
				t.Fatal("loaded before the startup delay")
			}
			f.clock.Advance(time.Nanosecond)
			check("after the delay", func(p probe) int { return p.after })
		})
	}
}

func TestQueueMetricsUnderConcurrentLoad(t *testing.T) {
	tests := []struct {
		backend Backend
		// check is given the scrape taken with 2 running and 3 waiting, and
		// the one taken once all five are done.
		check func(t *testing.T, busy, done map[string]float64)
	}{
		{BackendVLLM, func(t *testing.T, busy, done map[string]float64) {
			l := `{engine="0",model_name="fake-model"}`
			wantSample(t, busy, MetricVLLMRunning+l, 2)
			wantSample(t, busy, MetricVLLMWaiting+l, 3)
			wantSample(t, busy, MetricVLLMKVCacheUsage+l, 1)
			wantSample(t, done, MetricVLLMRunning+l, 0)
			wantSample(t, done, MetricVLLMWaiting+l, 0)
			wantSample(t, done, MetricVLLMKVCacheUsage+l, 0)
			// max_tokens 4 cuts every generation short.
			wantSample(t, done, MetricVLLMRequestSuccess+`{engine="0",finished_reason="length",model_name="fake-model"}`, 5)
			wantSample(t, done, MetricVLLMRequestSuccess+`{engine="0",finished_reason="stop",model_name="fake-model"}`, 0)
			wantSample(t, done, MetricVLLMPromptTokens+l, 10)
			wantSample(t, done, MetricVLLMGenTokens+l, 20)
			// Latencies: 1s, 1s, 2s, 2s, 3s (queue wait + service time).
			wantSample(t, done, MetricVLLME2ELatency+"_count"+l, 5)
			wantSample(t, done, MetricVLLME2ELatency+"_sum"+l, 9)
			wantSample(t, done, MetricVLLME2ELatency+`_bucket{engine="0",le="0.8",model_name="fake-model"}`, 0)
			wantSample(t, done, MetricVLLME2ELatency+`_bucket{engine="0",le="1",model_name="fake-model"}`, 2)
			wantSample(t, done, MetricVLLME2ELatency+`_bucket{engine="0",le="2",model_name="fake-model"}`, 4)
			wantSample(t, done, MetricVLLME2ELatency+`_bucket{engine="0",le="2.5",model_name="fake-model"}`, 4)
			wantSample(t, done, MetricVLLME2ELatency+`_bucket{engine="0",le="5",model_name="fake-model"}`, 5)
			wantSample(t, done, MetricVLLME2ELatency+`_bucket{engine="0",le="+Inf",model_name="fake-model"}`, 5)
		}},
		{BackendTriton, func(t *testing.T, busy, done map[string]float64) {
			l := `{model="fake-model",version="1"}`
			wantSample(t, busy, MetricTritonPending+l, 3)
			wantSample(t, busy, MetricTritonSuccess+l, 0)
			wantSample(t, busy, MetricTritonFailure+l, 1) // the 429
			wantSample(t, done, MetricTritonPending+l, 0)
			wantSample(t, done, MetricTritonSuccess+l, 5)
			wantSample(t, done, MetricTritonCount+l, 5)
			wantSample(t, done, MetricTritonFailure+l, 1)
			wantSample(t, done, MetricTritonDurationUS+l, 9e6)
			wantSample(t, done, MetricTritonQueueDuration+l, 4e6) // 0+0+1+1+2 s
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.backend), func(t *testing.T) {
			f := start(t, Config{Backend: tt.backend, Concurrency: 2, MaxQueue: 3, ServiceTime: time.Second})
			path, body := inferPath(tt.backend)
			var wg sync.WaitGroup
			codes := make(chan int, 5)
			for range 5 {
				wg.Go(func() {
					r, err := send("POST", f.url+path, body)
					if err != nil {
						t.Error(err)
						return
					}
					codes <- r.status
				})
			}
			f.waitState(t, 2, 3, 2)
			// The queue is full: the sixth request is turned away at once.
			if got := f.do(t, "POST", path, body).status; got != http.StatusTooManyRequests {
				t.Errorf("sixth request: %d, want 429", got)
			}
			busy := f.scrape(t)

			f.clock.Advance(time.Second)
			f.waitState(t, 2, 1, 2)
			f.clock.Advance(time.Second)
			f.waitState(t, 1, 0, 1)
			f.clock.Advance(time.Second)
			wg.Wait()
			close(codes)
			for c := range codes {
				if c != http.StatusOK {
					t.Errorf("queued request answered %d", c)
				}
			}
			if st := f.Stats(); st.Succeeded != 5 || st.Rejected != 1 || st.Running != 0 || st.Waiting != 0 {
				t.Errorf("stats %+v", st)
			}
			tt.check(t, busy, f.scrape(t))
		})
	}
}

func TestQueueIsFIFOAndForgetsClientsThatLeave(t *testing.T) {
	f := start(t, Config{Concurrency: 1, ServiceTime: time.Second})
	// Clients may see their answers in any order; the fake clock's time in
	// each answer ("created") says when the server finished it.
	var (
		mu       sync.Mutex
		finished = map[string]int64{}
		wg       sync.WaitGroup
	)
	t0 := f.clock.Now().Unix()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	submit := func(name string, ctx context.Context) {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", f.url+"/v1/completions",
				strings.NewReader(`{"prompt":"`+name+`"}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return // the client that gives up
			}
			defer resp.Body.Close()
			var c CompletionResponse
			if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			finished[name] = c.Created - t0
			mu.Unlock()
		})
	}
	submit("a", context.Background())
	f.waitState(t, 1, 0, 1)
	submit("b", context.Background())
	f.waitState(t, 1, 1, 1)
	submit("quitter", ctx)
	f.waitState(t, 1, 2, 1)
	submit("c", context.Background())
	f.waitState(t, 1, 3, 1)
	submit("d", context.Background())
	f.waitState(t, 1, 4, 1)

	cancel() // "quitter" leaves the queue without ever running
	f.waitState(t, 1, 3, 1)
	for _, left := range []int{2, 1, 0} {
		f.clock.Advance(time.Second)
		f.waitState(t, 1, left, 1)
	}
	f.clock.Advance(time.Second)
	wg.Wait()
	if want := map[string]int64{"a": 1, "b": 2, "c": 3, "d": 4}; !maps.Equal(finished, want) {
		t.Errorf("finished at %v s, want %v", finished, want)
	}
	if st := f.Stats(); st.Succeeded != 4 || st.Running != 0 || st.Waiting != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestErrorRateIsExact(t *testing.T) {
	tests := []struct {
		rate      float64
		wantFails int   // among 60 requests
		wantFirst []int // 1-based positions of the first failures
	}{
		{0, 0, nil},
		{0.1, 6, []int{10, 20}},
		{0.25, 15, []int{4, 8, 12}},
		{1.0 / 3, 20, []int{3, 6, 9}},
		{0.5, 30, []int{2, 4, 6}},
		{0.05, 3, []int{20, 40, 60}},
		{1, 60, []int{1, 2, 3}},
	}
	for _, backend := range []Backend{BackendVLLM, BackendTriton} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/%.3f", backend, tt.rate), func(t *testing.T) {
				f := start(t, Config{Backend: backend, ErrorRate: tt.rate})
				path, body := inferPath(backend)
				var failed []int
				for i := 1; i <= 60; i++ {
					switch got := f.do(t, "POST", path, body).status; got {
					case 500:
						failed = append(failed, i)
					case 200:
					default:
						t.Fatalf("request %d: %d", i, got)
					}
				}
				if len(failed) != tt.wantFails {
					t.Errorf("%d of 60 failed, want %d (at %v)", len(failed), tt.wantFails, failed)
				}
				for i, pos := range tt.wantFirst {
					if i >= len(failed) || failed[i] != pos {
						t.Errorf("failures at %v, want them to start %v", failed, tt.wantFirst)
						break
					}
				}
				if st := f.Stats(); st.Failed != uint64(tt.wantFails) || st.Succeeded != uint64(60-tt.wantFails) {
					t.Errorf("stats %+v", st)
				}
			})
		}
	}
}

func TestErrorRateHoldsUnderConcurrency(t *testing.T) {
	f := start(t, Config{ErrorRate: 0.25, Concurrency: 3})
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		codes = map[int]int{}
	)
	for range 80 {
		wg.Go(func() {
			r, err := send("POST", f.url+"/v1/completions", `{"prompt":"x"}`)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			codes[r.status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[500] != 20 || codes[200] != 60 {
		t.Errorf("codes %v, want 20 500s and 60 200s", codes)
	}
}

func TestRatio(t *testing.T) {
	tests := []struct {
		x    float64
		p, q int64
	}{
		{0, 0, 1}, {1, 1, 1}, {0.5, 1, 2}, {0.1, 1, 10}, {1.0 / 3, 1, 3}, {2.0 / 3, 2, 3},
		{0.125, 1, 8}, {0.001, 1, 1000}, {0.123, 123, 1000}, {0.00001, 0, 1},
	}
	for _, tt := range tests {
		if p, q := ratio(tt.x, 10000); p != tt.p || q != tt.q {
			t.Errorf("ratio(%v) = %d/%d, want %d/%d", tt.x, p, q, tt.p, tt.q)
		}
	}
}

func TestCrash(t *testing.T) {
	t.Run("fail-after answers N requests then drops every connection", func(t *testing.T) {
		calls := make(chan string, 4)
		f := start(t, Config{FailAfter: 2, OnCrash: func(reason string) { calls <- reason }})
		for i := range 2 {
			if got := f.do(t, "POST", "/v1/completions", `{"prompt":"x"}`).status; got != 200 {
				t.Fatalf("request %d: %d", i+1, got)
			}
		}
		select {
		case reason := <-calls:
			if !strings.Contains(reason, "fail-after") {
				t.Errorf("crash reason %q", reason)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no crash after the second answer")
		}
		<-f.Crashed()
		for _, path := range []string{"/health", "/v1/models", "/metrics"} {
			if _, err := send("GET", f.url+path, ""); err == nil {
				t.Errorf("GET %s answered after the crash", path)
			}
		}
		if len(calls) != 0 {
			t.Errorf("OnCrash called again: %q", <-calls)
		}
	})
	t.Run("crash-after fires on the clock and aborts requests in flight", func(t *testing.T) {
		f := start(t, Config{CrashAfter: time.Minute, ServiceTime: time.Hour, Concurrency: 1})
		errs := make(chan error, 2)
		for range 2 { // one running, one queued
			go func() {
				_, err := send("POST", f.url+"/v1/completions", `{"prompt":"x"}`)
				errs <- err
			}()
		}
		f.waitState(t, 1, 1, 2) // the crash timer and the service time
		f.clock.Advance(time.Minute)
		<-f.Crashed()
		for range 2 {
			if err := <-errs; err == nil {
				t.Error("a request in flight was answered after the crash")
			}
		}
	})
	t.Run("crash_after armed and disarmed at run time", func(t *testing.T) {
		f := start(t, Config{})
		if _, err := f.SetFaults(Faults{CrashAfter: new(schema.Duration(time.Minute))}); err != nil {
			t.Fatal(err)
		}
		if st := f.FaultState(); !st.CrashAt.Equal(f.clock.Now().Add(time.Minute)) {
			t.Errorf("crash_at %v", st.CrashAt)
		}
		if _, err := f.SetFaults(Faults{CrashAfter: new(schema.Duration(0))}); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Hour)
		time.Sleep(10 * time.Millisecond)
		select {
		case <-f.Crashed():
			t.Fatal("crashed after the timer was disarmed")
		default:
		}
		if _, err := f.SetFaults(Faults{CrashAfter: new(schema.Duration(time.Second))}); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Second)
		<-f.Crashed()
	})
}

func TestRevisionHeader(t *testing.T) {
	tests := []struct {
		backend  Backend
		revision string
		paths    []string
	}{
		{BackendVLLM, "rev-b", []string{"/health", "/v1/models", "/metrics", "/admin/faults", "/nope"}},
		{BackendTriton, "rev-c", []string{"/v2/health/live", "/v2/health/ready", "/metrics", "/nope"}},
		{BackendVLLM, "", []string{"/health"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.backend)+"/"+tt.revision, func(t *testing.T) {
			f := start(t, Config{Backend: tt.backend, Revision: tt.revision})
			for _, p := range tt.paths {
				r := f.do(t, "GET", p, "")
				if got, ok := r.header[HeaderRevision]; tt.revision == "" && ok || tt.revision != "" && (len(got) != 1 || got[0] != tt.revision) {
					t.Errorf("GET %s: %s = %q, want %q", p, HeaderRevision, got, tt.revision)
				}
			}
			path, body := inferPath(tt.backend)
			if r := f.do(t, "POST", path, body); tt.revision != "" && !strings.Contains(string(r.body), `"revision":"`+tt.revision+`"`) {
				t.Errorf("inference body does not echo the revision: %s", r.body)
			}
		})
	}
}
