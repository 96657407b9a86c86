package app

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
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
