package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/internal/process/config"
)

// Gateway serves the REST API.
type Gateway struct {
	sweeper Sweeper
	srv     *http.Server
	addr    string
	timeout time.Duration
	drain   time.Duration
	log     *zap.Logger
	ready   chan string

	// draining is set once the gateway is asked to stop: /readyz answers
	// 503 while the listener still serves (see Run).
	draining atomic.Bool
}

// Sweeper is background upkeep of the catalogue that runs as long as the
// gateway does (internal/services/reconcile).
type Sweeper interface{ Run(ctx context.Context) }

// Sweepers runs several sweepers side by side; Run returns when all have.
type Sweepers []Sweeper

// Run runs every sweeper in its own goroutine until ctx is done.
func (ss Sweepers) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() { s.Run(ctx) })
	}
	wg.Wait()
}

// NewGateway wraps the API handler in an HTTP server with sane timeouts.
// WriteTimeout stays 0 because log follows and event streams are long-lived.
func NewGateway(h http.Handler, sw Sweeper, cfg config.Config, l *zap.Logger) *Gateway {
	g := &Gateway{
		sweeper: sw,
		addr:    cfg.ListenAddr,
		timeout: cfg.ShutdownTimeout,
		drain:   cfg.DrainDelay,
		log:     l.Named("gateway"),
		ready:   make(chan string, 1),
	}
	g.srv = &http.Server{
		Handler:           g.notReadyWhileDraining(h),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	return g
}

// notReadyWhileDraining answers /readyz 503 once the gateway is stopping;
// every other request is still served.
func (g *Gateway) notReadyWhileDraining(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" && g.draining.Load() {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"type":"https://atelier-ml.dev/problems/unavailable","title":"Service unavailable","status":503,"detail":"not ready: the gateway is stopping"}` + "\n"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Addr returns the bound address once the gateway listens.
func (g *Gateway) Addr(ctx context.Context) (string, error) {
	select {
	case a := <-g.ready:
		g.ready <- a
		return a, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Run listens until ctx is cancelled, then drains in-flight requests.
func (g *Gateway) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		return fmt.Errorf("gateway listen on %s: %w", g.addr, err)
	}
	g.ready <- ln.Addr().String()
	g.log.Info("gateway listening", zap.String("addr", ln.Addr().String()))
	errc := make(chan error, 1)
	go func() { errc <- g.srv.Serve(ln) }()
	swept := make(chan struct{})
	go func() { defer close(swept); g.sweeper.Run(ctx) }()
	defer func() { <-swept }()
	select {
	case err := <-errc:
		return fmt.Errorf("gateway: %w", err)
	case <-ctx.Done():
	}
	if g.drain > 0 {
		// Kubernetes sends SIGTERM and removes the pod from its Service's
		// endpoints at the same time; kube-proxy and load balancers take a
		// moment to notice. Closing the listener at once would refuse (or,
		// once the pod's network is gone, black-hole) the connections they
		// still send here.
		g.draining.Store(true)
		g.log.Info("gateway draining", zap.Duration("delay", g.drain))
		select {
		case err := <-errc:
			return fmt.Errorf("gateway: %w", err)
		case <-time.After(g.drain):
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	if err := g.srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("gateway shutdown: %w", err)
	}
	g.log.Info("gateway stopped")
	return nil
}
