package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/atelier-ml/atelier/examples/modelserver"
)

// engineFlags are the real engines' own command lines, so that the binary
// can stand in for `vllm` and `tritonserver` where Atelier's local runtime
// starts them (`atelier worker --local-engine vllm=<this binary>`):
//
//	vllm serve [MODEL] --model M [--served-model-name N] --host H --port P
//	tritonserver --model-repository=R --model-control-mode=explicit --load-model=N
//	    --http-address H --http-port P --grpc-address H --grpc-port G
//	    --metrics-address H --metrics-port M
//
// They map onto -addr, -metrics-addr, -model and -backend; what a fake has
// no use for (the model repository, gRPC) is accepted and ignored. A
// Triton flag selects the triton dialect unless -backend is given.
type engineFlags struct {
	// vLLM
	host, port, servedName string
	// Triton
	httpAddr, httpPort, metricsAddr, metricsPort, loadModel string
	repository                                              string
	ignored                                                 string
}

// tritonOnly are the flags that mean "speak Triton".
var tritonOnly = []string{"model-repository", "model-control-mode", "load-model",
	"http-address", "http-port", "grpc-address", "grpc-port", "metrics-address", "metrics-port"}

func (e *engineFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.host, "host", "", "vLLM: listen host (with --port; default 127.0.0.1)")
	fs.StringVar(&e.port, "port", "", "vLLM: listen port, as --addr HOST:PORT")
	fs.StringVar(&e.servedName, "served-model-name", "", "vLLM: the name the model answers to (overrides -model)")
	fs.StringVar(&e.httpAddr, "http-address", "", "Triton: listen host of the HTTP API")
	fs.StringVar(&e.httpPort, "http-port", "", "Triton: HTTP API port, as --addr")
	fs.StringVar(&e.metricsAddr, "metrics-address", "", "Triton: listen host of /metrics")
	fs.StringVar(&e.metricsPort, "metrics-port", "", "Triton: /metrics port, as --metrics-addr")
	fs.StringVar(&e.loadModel, "load-model", "", "Triton: the model loaded (as -model)")
	fs.StringVar(&e.repository, "model-repository", "", "Triton: the model repository; loaded (read whole) when it is a local path")
	for _, name := range []string{"model-control-mode", "grpc-address", "grpc-port"} {
		fs.StringVar(&e.ignored, name, "", "Triton: accepted and ignored")
	}
}

// splitServe drops vLLM's `serve` subcommand and its optional positional
// model from args; model is "" when there is none.
func splitServe(args []string) (rest []string, model string) {
	if len(args) == 0 || args[0] != "serve" {
		return args, ""
	}
	args = args[1:]
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[1:], args[0]
	}
	return args, ""
}

// apply folds the engine flags that were set into the server's settings.
func (e *engineFlags) apply(fs *flag.FlagSet, cfg *modelserver.Config, addr, metricsAddr *string, positionalModel string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	triton := false
	for _, name := range tritonOnly {
		triton = triton || set[name]
	}
	if triton && (set["host"] || set["port"] || set["served-model-name"]) {
		return fmt.Errorf("%w: vLLM flags (--host, --port, --served-model-name) and Triton flags together", modelserver.ErrInvalidConfig)
	}
	if triton && !set["backend"] {
		cfg.Backend = modelserver.BackendTriton
	}
	if positionalModel != "" && !set["model"] {
		cfg.Model = positionalModel
	}
	// A model or repository that is an existing local path is loaded, as
	// an engine would, and responses say which bytes were loaded
	// (X-Model-Weights). Other values (hub IDs, s3:// URIs, paths that
	// exist only where a real engine would run) are names to the fake.
	weights := e.repository
	if !triton && filepath.IsAbs(cfg.Model) {
		weights = cfg.Model
	}
	if _, err := os.Stat(weights); err == nil && filepath.IsAbs(weights) {
		d, err := modelserver.WeightsDigest(weights)
		if err != nil {
			return err
		}
		cfg.WeightsDigest = d
	}
	if e.servedName != "" {
		cfg.Model = e.servedName
	}
	if e.loadModel != "" {
		cfg.Model = e.loadModel
	}
	if set["host"] || set["port"] {
		*addr = hostPort(e.host, e.port, *addr)
	}
	if set["http-address"] || set["http-port"] {
		*addr = hostPort(e.httpAddr, e.httpPort, *addr)
	}
	if set["metrics-address"] || set["metrics-port"] {
		*metricsAddr = hostPort(e.metricsAddr, e.metricsPort, *metricsAddr)
	}
	return nil
}

// hostPort replaces the parts of current ("host:port") that are given.
func hostPort(host, port, current string) string {
	h, p, err := net.SplitHostPort(current)
	if err != nil {
		h, p = "127.0.0.1", "8000"
	}
	if host != "" {
		h = host
	}
	if port != "" {
		p = port
	}
	return net.JoinHostPort(h, p)
}
