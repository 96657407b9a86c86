package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/atelier-ml/atelier/internal/platform/telemetry"
)

// WithMetricsServer runs p and, when addr is set, an HTTP server on addr
// serving m's registry at /metrics, for processes that serve no REST API
// (workers: `atelier worker --metrics-addr :9090`). The server stops with
// p; failing to listen stops the process, since a scraper would otherwise
// see the worker as down without saying why.
func WithMetricsServer(p Process, addr string, m *telemetry.Metrics) Process {
	if addr == "" {
		return p
	}
	return &metricsServer{p: p, addr: addr, m: m}
}

type metricsServer struct {
	p    Process
	addr string
	m    *telemetry.Metrics

	mu    sync.Mutex
	bound string
}

// Addr is the address the server listens on once Run has bound it.
func (s *metricsServer) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bound
}

func (s *metricsServer) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("metrics listen on %s: %w", s.addr, err)
	}
	s.mu.Lock()
	s.bound = ln.Addr().String()
	s.mu.Unlock()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.m.HTTPHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.p.Run(ctx) }()
	var runErr error
	select {
	case runErr = <-done:
	case err := <-served:
		cancel() // the process goes on only with its metrics
		runErr = errors.Join(fmt.Errorf("metrics server: %w", err), <-done)
	}
	sctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	_ = srv.Shutdown(sctx)
	return runErr
}
