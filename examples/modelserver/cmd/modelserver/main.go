// Command modelserver runs the fake vLLM / Triton model server of package
// modelserver: flags override ATELIER_FAKE_* variables, which override the
// defaults. It exits 0 after SIGTERM or SIGINT (draining requests for up to
// 10 s), 3 when an injected crash fires, 1 on a bad flag or listen error.
//
//	go run ./examples/modelserver/cmd/modelserver -backend vllm -startup-delay 5s -service-time 200ms
//
// It also takes the real engines' command lines (see engineFlags), so it
// can stand in for `vllm` or `tritonserver` on a machine without them:
//
//	modelserver serve --model tiny --host 127.0.0.1 --port 9000
//	modelserver --model-repository=/m --load-model=resnet --http-port 9000 --metrics-port 9002
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/atelier-ml/atelier/examples/modelserver"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log); err != nil {
		log.Error("modelserver", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	var cfg modelserver.Config
	if err := cfg.ApplyEnv(os.LookupEnv); err != nil {
		return err
	}
	addr, metricsAddr := envOr("ATELIER_FAKE_ADDR", "127.0.0.1:8000"), os.Getenv("ATELIER_FAKE_METRICS_ADDR")
	cfg.RegisterFlags(flag.CommandLine)
	flag.StringVar(&addr, "addr", addr, "listen address (ATELIER_FAKE_ADDR)")
	flag.StringVar(&metricsAddr, "metrics-addr", metricsAddr, "serve /metrics here instead, as Triton's port 8002 (ATELIER_FAKE_METRICS_ADDR)")
	var engine engineFlags
	engine.register(flag.CommandLine)
	// As an engine that needs a credential (vLLM's HF_TOKEN for a gated
	// model): refuse to start without it, never print it.
	requireEnv := flag.String("require-env", "", "comma-separated variables that must be set and non-empty, or the server exits")
	args, model := splitServe(os.Args[1:])
	_ = flag.CommandLine.Parse(args) // ExitOnError
	if flag.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", modelserver.ErrInvalidConfig, flag.Arg(0))
	}
	if err := engine.apply(flag.CommandLine, &cfg, &addr, &metricsAddr, model); err != nil {
		return err
	}
	cfg.NoMetricsRoute = metricsAddr != ""
	cfg.Logger = log
	cfg.OnCrash = func(string) { os.Exit(3) }
	for _, name := range strings.Split(*requireEnv, ",") {
		if name = strings.TrimSpace(name); name != "" && os.Getenv(name) == "" {
			return fmt.Errorf("%w: %s is not set (required by -require-env)", modelserver.ErrInvalidConfig, name)
		}
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fake := modelserver.New(cfg)
	defer fake.Close()
	servers := []*http.Server{{Addr: addr, Handler: fake, ReadHeaderTimeout: 10 * time.Second}}
	if metricsAddr != "" {
		servers = append(servers, &http.Server{Addr: metricsAddr, Handler: fake.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second})
	}
	errc := make(chan error, len(servers))
	for _, srv := range servers {
		ln, err := net.Listen("tcp", srv.Addr)
		if err != nil {
			return err
		}
		log.Info("listening", "addr", ln.Addr().String())
		go func() { errc <- srv.Serve(ln) }()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	for _, srv := range servers {
		errs = append(errs, srv.Shutdown(shutdownCtx))
	}
	return errors.Join(errs...)
}

func envOr(name, dflt string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return dflt
}
