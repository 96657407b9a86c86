package local

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/atelier-ml/atelier/inference"
)

// engine is how the local runtime starts one backend's serving engine: the
// program a serving image would run, with the arguments its container
// would get (inference.ContainerArgs), bound to ports of its own on
// 127.0.0.1 so that replicas can share the machine.
type engine struct {
	// program is looked up on the replica's PATH unless the worker's
	// --local-engine names an executable.
	program string
	// subcommand comes before the arguments.
	subcommand []string
	// install says how to get program, for the error when it is missing.
	install string
	// listen is the flags that bind a replica to its ports.
	listen func(p replicaPorts) []string
}

// replicaPorts are one replica process's ports on 127.0.0.1; grpc and
// metrics are 0 when the engine serves them on the HTTP port or not at all.
type replicaPorts struct{ http, grpc, metrics int }

var engines = map[inference.Backend]engine{
	inference.BackendVLLM: {
		// `vllm serve` takes the arguments of the vllm-openai image's
		// API server, which inference.DefaultArgs are.
		program: "vllm", subcommand: []string{"serve"},
		install: "pip install vllm",
		listen: func(p replicaPorts) []string {
			return []string{"--host", "127.0.0.1", "--port", strconv.Itoa(p.http)}
		},
	},
	inference.BackendTriton: {
		program: "tritonserver",
		install: "install NVIDIA Triton Inference Server so that tritonserver is on PATH (a release from github.com/triton-inference-server/server)",
		// Triton listens on every interface by default, and its gRPC and
		// metrics ports too would collide between replicas.
		listen: func(p replicaPorts) []string {
			return []string{
				"--http-address", "127.0.0.1", "--http-port", strconv.Itoa(p.http),
				"--grpc-address", "127.0.0.1", "--grpc-port", strconv.Itoa(p.grpc),
				"--metrics-address", "127.0.0.1", "--metrics-port", strconv.Itoa(p.metrics),
			}
		},
	},
}

// engineArgs is the replica's command line after the program: the
// container's arguments with the image's fixed port dropped, then the
// replica's own ports. Users cannot set the port flags (they are
// inference's reserved flags), so the ones appended are the only ones.
func engineArgs(e engine, spec inference.EndpointSpec, ports replicaPorts) []string {
	args := slices.Clone(e.subcommand)
	args = append(args, withoutFlag(inference.ContainerArgs(spec), "--port")...)
	return append(args, e.listen(ports)...)
}

// withoutFlag drops flag ("--port 8000" or "--port=8000") from args.
func withoutFlag(args []string, flag string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == flag:
			i++ // and its value
		case strings.HasPrefix(args[i], flag+"="):
		default:
			out = append(out, args[i])
		}
	}
	return out
}

// portsFor picks free ports for one replica process of a backend: the
// HTTP port, and a gRPC and a metrics port where the engine has them.
// The listeners are held together so that the ports differ, then closed
// for the engine to take: another process could take one in between,
// which the engine then reports by exiting (and it is restarted).
func portsFor(info inference.BackendInfo) (replicaPorts, error) {
	n := 1
	if info.GRPCPort != 0 {
		n++
	}
	if info.MetricsPort != info.HTTPPort {
		n++
	}
	got := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return replicaPorts{}, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		got = append(got, l.Addr().(*net.TCPAddr).Port)
	}
	p := replicaPorts{http: got[0]}
	got = got[1:]
	if info.GRPCPort != 0 {
		p.grpc, got = got[0], got[1:]
	}
	if info.MetricsPort != info.HTTPPort {
		p.metrics = got[0]
	}
	return p, nil
}

// metricsPort is where the replica serves info.MetricsPath.
func (p replicaPorts) metricsPort() int {
	if p.metrics != 0 {
		return p.metrics
	}
	return p.http
}

// ParseEngines checks the worker's --local-engine settings (backend →
// executable) and makes their paths absolute, since replicas run in
// other directories.
func ParseEngines(settings map[string]string) (map[inference.Backend]string, error) {
	out := map[inference.Backend]string{}
	for name, path := range settings {
		b := inference.Backend(name)
		if _, ok := engines[b]; !ok {
			return nil, fmt.Errorf("--local-engine %s=%s: unknown backend %q; use vllm or triton", name, path, name)
		}
		if path == "" {
			return nil, fmt.Errorf("--local-engine %s=: give the engine's executable", name)
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, fmt.Errorf("--local-engine %s=%s: %w", name, path, err)
		}
		out[b] = abs
	}
	return out, nil
}

// errEngineMissing is why a backend's engine cannot run on this worker.
type errEngineMissing struct {
	backend inference.Backend
	install string
	cause   error
}

func (e *errEngineMissing) Error() string {
	return fmt.Sprintf("the %s engine is not installed on this worker (%v): %s, or start the worker with --local-engine %s=<path>",
		e.backend, e.cause, e.install, e.backend)
}

// enginePath finds the executable of a backend's engine: the worker's
// --local-engine setting, else the engine's program on path (the
// replica's PATH, as for a step).
func enginePath(b inference.Backend, overrides map[inference.Backend]string, path string) (string, error) {
	e, ok := engines[b]
	if !ok {
		return "", fmt.Errorf("unknown backend %q", b)
	}
	if p, ok := overrides[b]; ok {
		if err := executable(p); err != nil {
			return "", &errEngineMissing{backend: b, install: e.install, cause: fmt.Errorf("--local-engine %s=%s %w", b, p, err)}
		}
		return p, nil
	}
	p, err := lookPath(e.program, path, "/")
	if err != nil {
		return "", &errEngineMissing{backend: b, install: e.install, cause: err}
	}
	return p, nil
}
