package webhooks_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/services/webhooks"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/internal/store/storetest"
	"github.com/atelier-ml/atelier/runstate"
)

func TestSignAndVerify(t *testing.T) {
	body := []byte(`{"id":"evt-1"}`)
	now := time.Unix(1_700_000_000, 0)
	sig := webhooks.Sign("s3cret-s3cret-s3", now.Unix(), body)
	if !strings.HasPrefix(sig, "sha256=") || len(sig) != len("sha256=")+64 {
		t.Fatalf("signature %q", sig)
	}
	ts := "1700000000"
	if err := webhooks.Verify("s3cret-s3cret-s3", ts, sig, body, now, time.Minute); err != nil {
		t.Errorf("valid delivery refused: %v", err)
	}
	for name, tc := range map[string]struct {
		secret, ts string
		body       []byte
		now        time.Time
	}{
		"other secret":  {"another-secret-x", ts, body, now},
		"other body":    {"s3cret-s3cret-s3", ts, []byte(`{"id":"evt-2"}`), now},
		"other time":    {"s3cret-s3cret-s3", "1700000001", body, now},
		"replayed late": {"s3cret-s3cret-s3", ts, body, now.Add(time.Hour)},
	} {
		if err := webhooks.Verify(tc.secret, tc.ts, sig, tc.body, tc.now, time.Minute); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCheckURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://hooks.example.com/a?b=c": "",
		"http://example.com:8080/x":       "",
		"ftp://example.com/x":             "must be an http or https URL",
		"https:///path":                   "needs a host",
		"https://u:p@example.com/":        "must not carry credentials",
		"https://example.com/#frag":       "must not have a fragment",
		"http://127.0.0.1:9/x":            "loopback",
		"http://10.1.2.3/x":               "private",
		"http://169.254.169.254/latest":   "link-local",
		"http://[::1]/x":                  "loopback",
		"http://[::ffff:10.0.0.1]/x":      "private",
		"http://100.64.0.1/x":             "CGNAT",
		"not a url at all":                "http or https",
	} {
		got := webhooks.CheckURL(raw, false)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("CheckURL(%q) = %q, want %q", raw, got, want)
		}
	}
	if got := webhooks.CheckURL("http://127.0.0.1:9/x", true); got != "" {
		t.Errorf("allowed private: %q", got)
	}
	if webhooks.Refused(netip.MustParseAddr("93.184.216.34")) != "" {
		t.Error("a public address is refused")
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 4: 80 * time.Second, 20: time.Hour} {
		if got := webhooks.Backoff(10*time.Second, time.Hour, n); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
}

// fixture: a store with one project, one webhook pointing at url, and one
// finished run whose run.finished is queued.
func fixture(t *testing.T, url string) (*store.Store, catalog.Webhook) {
	t.Helper()
	s, err := store.Open(t.Context(), storetest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateProject(t.Context(), catalog.Project{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	w, err := s.CreateWebhook(t.Context(), catalog.Webhook{Project: "p", URL: url, Events: []string{catalog.EventRunFinished},
		Secret: "0123456789abcdef", Enabled: true}, 50)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := s.MirrorRun(t.Context(), runstate.Status{RunID: "r1", Project: "p", Workflow: "w", State: runstate.Succeeded,
		Seq: 1, StartedAt: &now, FinishedAt: &now}); err != nil {
		t.Fatal(err)
	}
	return s, w
}

func deliveries(t *testing.T, s *store.Store, w catalog.Webhook) []catalog.WebhookDelivery {
	t.Helper()
	page, err := s.ListWebhookDeliveries(t.Context(), "p", w.ID, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	return page.Deliveries
}

// Two dispatchers (two gateways) on one outbox: the event is sent once
// per attempt, signed; a 500 is retried after the backoff; the third
// attempt's 200 ends it; the log has all three.
func TestDispatcherRetriesAndNeverDoublesSends(t *testing.T) {
	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r)
		bodies = append(bodies, b)
		n := len(got)
		mu.Unlock()
		if n < 3 {
			http.Error(w, "not yet", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	s, w := fixture(t, srv.URL)
	opt := webhooks.Options{AllowPrivate: true, Backoff: 100 * time.Millisecond, Poll: 10 * time.Millisecond}
	a := webhooks.New(s, time.Now, zap.NewNop(), opt)
	b := webhooks.New(s, time.Now, zap.NewNop(), opt)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = a.Tick(t.Context()) })
		wg.Go(func() { _, _ = b.Tick(t.Context()) })
		wg.Wait()
		if ds := deliveries(t, s, w); len(ds) == 1 && ds[0].State == catalog.DeliverySucceeded {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	d := deliveries(t, s, w)[0]
	if d.State != catalog.DeliverySucceeded || d.Attempts != 3 || len(d.Log) != 3 {
		t.Fatalf("delivery %+v", d)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("receiver got %d requests, want 3 (no attempt sent twice)", len(got))
	}
	for i, r := range got {
		if err := webhooks.Verify("0123456789abcdef", r.Header.Get(webhooks.HeaderTimestamp), r.Header.Get(webhooks.HeaderSignature), bodies[i], time.Now(), time.Minute); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
		if r.Header.Get(webhooks.HeaderEvent) != catalog.EventRunFinished || r.Header.Get(webhooks.HeaderEventID) != d.EventID {
			t.Errorf("request %d headers %v", i, r.Header)
		}
		if string(bodies[i]) != string(bodies[0]) {
			t.Errorf("attempt %d sent other bytes", i+1)
		}
	}
	if gap := d.Log[1].StartedAt.Sub(d.Log[0].StartedAt); gap < 100*time.Millisecond {
		t.Errorf("second attempt %s after the first, want at least the backoff", gap)
	}
	if *d.Log[0].StatusCode != 500 || !strings.Contains(d.Log[0].Error, "not yet") || *d.Log[2].StatusCode != 200 || d.Log[2].Error != "" {
		t.Errorf("log %+v", d.Log)
	}
}

// Without AllowPrivate, a name that resolves to loopback is refused when
// the delivery connects, and the delivery gives up after MaxAttempts.
func TestDispatcherRefusesPrivateDestinations(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	url := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) // a name, so CheckURL alone would pass it
	s, w := fixture(t, url)
	d := webhooks.New(s, time.Now, zap.NewNop(), webhooks.Options{Backoff: time.Millisecond, MaxAttempts: 2})
	for range 50 {
		if _, err := d.Tick(t.Context()); err != nil {
			t.Fatal(err)
		}
		if ds := deliveries(t, s, w); ds[0].State == catalog.DeliveryFailed {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	dl := deliveries(t, s, w)[0]
	if dl.State != catalog.DeliveryFailed || len(dl.Log) != 2 || !strings.Contains(dl.Log[1].Error, "loopback address") ||
		!strings.Contains(dl.Log[1].Error, "gave up after 2 attempts") || dl.Log[1].StatusCode != nil {
		t.Fatalf("delivery %+v log %+v", dl, dl.Log)
	}
	if hits.Load() != 0 {
		t.Errorf("the receiver on loopback was reached %d times", hits.Load())
	}
}
