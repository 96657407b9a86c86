package app

import (
	"context"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/platform/telemetry/telemetrytest"
)

type blockingProcess struct{ stopped chan struct{} }

func (p blockingProcess) Run(ctx context.Context) error {
	<-ctx.Done()
	close(p.stopped)
	return nil
}

// A worker with --metrics-addr serves its registry (the SDK's metrics
// included) until it stops; without the flag nothing listens.
func TestWithMetricsServer(t *testing.T) {
	m := telemetry.New(telemetry.Options{})
	m.SDK.WithTags(map[string]string{"task_queue": "q"}).Counter("temporal_worker_start").Inc(1)
	p := blockingProcess{stopped: make(chan struct{})}
	if WithMetricsServer(p, "", m) != Process(p) {
		t.Fatal("no address: the process runs alone")
	}
	s := WithMetricsServer(p, "127.0.0.1:0", m).(*metricsServer)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for s.Addr() == "" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	v, err := telemetrytest.Scrape("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if v[telemetrytest.Series("temporal_worker_start_total", "task_queue", "q")] != 1 || !v.Has("go_goroutines") {
		t.Fatalf("scrape: %v", v)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-p.stopped
}

func TestWithMetricsServerBadAddress(t *testing.T) {
	p := blockingProcess{stopped: make(chan struct{})}
	if err := WithMetricsServer(p, "256.0.0.1:x", telemetry.New(telemetry.Options{})).Run(t.Context()); err == nil {
		t.Fatal("a bad --metrics-addr must stop the process")
	}
}
