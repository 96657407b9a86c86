package modelserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Clock that moves only when Advance is called.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, fakeTimer{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves time and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	c.timers = kept
}

// Timers is the number of pending timers.
func (c *fakeClock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// fixture is a fake running behind httptest, on a fake clock.
type fixture struct {
	*Server
	clock *fakeClock
	url   string
}

func start(t *testing.T, cfg Config) *fixture {
	t.Helper()
	clock := newFakeClock()
	cfg.Clock = clock
	srv := New(cfg)
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return &fixture{Server: srv, clock: clock, url: ts.URL}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (f *fixture) do(t *testing.T, method, path, body string) reply {
	t.Helper()
	r, err := send(method, f.url+path, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// send does one request; it returns an error only when the transport fails
// (as after a crash). Safe to call from any goroutine.
func send(method, url, body string) (reply, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

func decode[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, r.body, err)
	}
	return v
}

// waitFor polls cond; the fake's goroutines move on their own between
// clock steps, so tests wait for the state they expect before acting.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitState waits until running, waiting and the clock's pending timers
// (one per running request with a service time) are as given.
func (f *fixture) waitState(t *testing.T, running, waiting, timers int) {
	t.Helper()
	waitFor(t, "running="+strconv.Itoa(running)+" waiting="+strconv.Itoa(waiting)+" timers="+strconv.Itoa(timers), func() bool {
		st := f.Stats()
		return st.Running == running && st.Waiting == waiting && f.clock.Timers() == timers
	})
}

// scrape returns the samples of /metrics keyed by name{labels}, checking
// that every line is well-formed and every sample follows its # TYPE.
func (f *fixture) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	r := f.do(t, http.MethodGet, "/metrics", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", r.status)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("metrics content type %q", ct)
	}
	return parseMetrics(t, r.body)
}

func parseMetrics(t *testing.T, body []byte) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	typed := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if fields, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(fields, " ")
			typed[name] = typ
			continue
		}
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("bad metrics line %q", line)
		}
		key, val := line[:i], line[i+1:]
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("bad value in %q: %v", line, err)
		}
		name, _, _ := strings.Cut(key, "{")
		base := name
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && typed[b] == "histogram" {
				base = b
			}
		}
		if typed[base] == "" {
			t.Errorf("sample %q has no # TYPE line before it", line)
		}
		if _, dup := out[key]; dup {
			t.Errorf("duplicate sample %q", key)
		}
		out[key] = v
	}
	return out
}

// want checks one sample.
func wantSample(t *testing.T, m map[string]float64, key string, want float64) {
	t.Helper()
	got, ok := m[key]
	if !ok {
		t.Errorf("metric %s missing", key)
		return
	}
	if got != want {
		t.Errorf("metric %s = %v, want %v", key, got, want)
	}
}

// inferBody is one request of the backend's inference route.
func inferPath(b Backend) (string, string) {
	if b == BackendTriton {
		return "/v2/models/fake-model/infer",
			`{"inputs":[{"name":"INPUT0","shape":[2],"datatype":"INT64","data":[1,2]}]}`
	}
	return "/v1/completions", `{"prompt":"hello world","max_tokens":4}`
}
