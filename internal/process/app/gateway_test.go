package app

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/internal/process/config"
)

type countingSweeper struct{ runs, done *atomic.Int32 }

func (c countingSweeper) Run(ctx context.Context) {
	c.runs.Add(1)
	<-ctx.Done()
	c.done.Add(1)
}

// TestSweepersRunSideBySide: the gateway's upkeep (reconciler, retention)
// runs concurrently, and Run returns once every sweeper has stopped.
func TestSweepersRunSideBySide(t *testing.T) {
	var runs, done atomic.Int32
	ss := Sweepers{countingSweeper{&runs, &done}, countingSweeper{&runs, &done}, SweeperFunc(func(context.Context) {})}
	ctx, cancel := context.WithCancel(t.Context())
	returned := make(chan struct{})
	go func() { ss.Run(ctx); close(returned) }()
	deadline := time.Now().Add(5 * time.Second)
	for runs.Load() != 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if runs.Load() != 2 {
		t.Fatalf("%d sweepers running, want 2 at once", runs.Load())
	}
	cancel()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if done.Load() != 2 {
		t.Fatalf("Run returned with %d of 2 sweepers stopped", done.Load())
	}
}

// SweeperFunc adapts a function (a sweeper that returns at once, like
// retention when disabled).
type SweeperFunc func(context.Context)

func (f SweeperFunc) Run(ctx context.Context) { f(ctx) }

// TestGatewayDrainsBeforeClosing: asked to stop, the gateway answers
// /readyz 503 and keeps serving other requests for its drain delay (so a
// Service drops it before its listener closes), then stops.
func TestGatewayDrainsBeforeClosing(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok " + r.URL.Path)) })
	cfg := config.Default()
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.DrainDelay = 2 * time.Second
	g := NewGateway(h, SweeperFunc(func(context.Context) {}), cfg, zap.NewNop())
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan error, 1)
	go func() { stopped <- g.Run(ctx) }()
	addr, err := g.Addr(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string, error) {
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), nil
	}
	if code, body, err := get("/readyz"); err != nil || code != 200 {
		t.Fatalf("before the stop: /readyz %d %q %v", code, body, err)
	}
	cancel()
	deadline := time.Now().Add(time.Second)
	for {
		code, body, err := get("/readyz")
		if err != nil {
			t.Fatalf("draining: /readyz: %v", err)
		}
		if code == http.StatusServiceUnavailable {
			if !strings.Contains(body, "stopping") {
				t.Errorf("draining /readyz body %q", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d after the stop", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, body, err := get("/v1/projects"); err != nil || code != 200 || body != "ok /v1/projects" {
		t.Fatalf("draining: other requests must still be served: %d %q %v", code, body, err)
	}
	select {
	case err := <-stopped:
		t.Fatalf("the gateway stopped before its drain delay: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway did not stop after its drain delay")
	}
	if _, _, err := get("/readyz"); err == nil {
		t.Fatal("the listener still answers after the gateway stopped")
	}
}
