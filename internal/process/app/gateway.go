package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
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
	log     *zap.Logger
	ready   chan string
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
	return &Gateway{
		sweeper: sw,
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       60 * time.Second,
			IdleTimeout:       120 * time.Second,
		},
		addr:    cfg.ListenAddr,
		timeout: cfg.ShutdownTimeout,
		log:     l.Named("gateway"),
		ready:   make(chan string, 1),
	}
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
	sctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	if err := g.srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("gateway shutdown: %w", err)
	}
	g.log.Info("gateway stopped")
	return nil
}
