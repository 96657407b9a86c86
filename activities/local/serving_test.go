//go:build unix

package local

import (
	"bytes"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/inference"
)

// The serving tests run real replica processes: examples/modelserver,
// built once, stands in for vllm and tritonserver (it takes their command
// lines), as `--local-engine` lets it on a machine without them.

var (
	modelserverOnce sync.Once
	modelserverPath string
	modelserverErr  error
	modelserverDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if modelserverDir != "" {
		_ = os.RemoveAll(modelserverDir)
	}
	os.Exit(code)
}

// modelserver builds examples/modelserver's command once per test binary.
func modelserver(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds examples/modelserver and runs it")
	}
	modelserverOnce.Do(func() {
		modelserverDir, modelserverErr = os.MkdirTemp("", "atelier-modelserver-")
		if modelserverErr != nil {
			return
		}
		modelserverPath = filepath.Join(modelserverDir, "modelserver")
		goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
		out, err := exec.Command(goTool, "build", "-o", modelserverPath, "github.com/atelier-ml/atelier/examples/modelserver/cmd/modelserver").CombinedOutput()
		if err != nil {
			modelserverErr = &exec.Error{Name: "go build: " + string(out), Err: err}
		}
	})
	if modelserverErr != nil {
		t.Fatal(modelserverErr)
	}
	return modelserverPath
}

// servingHarness runs the endpoint activities the way a worker does:
// registered under their contract names, called through Temporal's test
// activity environment.
type servingHarness struct {
	t          *testing.T
	s          *Serving
	env        *testsuite.TestActivityEnvironment
	data       string
	ref        activities.EndpointRef
	runnerOpts []Option
	opts       []ServingOption
}

func newServingHarness(t *testing.T, runnerOpts []Option, opts ...ServingOption) *servingHarness {
	t.Helper()
	h := &servingHarness{t: t, data: t.TempDir(), ref: activities.EndpointRef{Project: "proj", Endpoint: "chat"},
		runnerOpts: runnerOpts, opts: opts}
	h.restart()
	return h
}

// restart replaces the worker's Serving with a new one on the same data
// dir, as a worker restart does (the old one's replicas are stopped).
func (h *servingHarness) restart() {
	if h.s != nil {
		h.s.Close()
	}
	var suite testsuite.WorkflowTestSuite
	h.env = suite.NewTestActivityEnvironment()
	r := New(newMemSink(), append([]Option{WithDataDir(h.data), WithGracePeriod(2 * time.Second)}, h.runnerOpts...)...)
	h.s = NewServing(r, append([]ServingOption{WithRestartBackoff(50*time.Millisecond, 200*time.Millisecond)}, h.opts...)...)
	h.s.Register(h.env)
	h.t.Cleanup(h.s.Close)
}

// withModelserver is a harness whose engines are examples/modelserver.
func withModelserver(t *testing.T) *servingHarness {
	bin := modelserver(t)
	return newServingHarness(t, nil, WithEngines(map[inference.Backend]string{inference.BackendVLLM: bin, inference.BackendTriton: bin}))
}

func vllmEndpoint(args ...string) inference.EndpointSpec {
	return inference.EndpointSpec{Backend: inference.BackendVLLM, Model: inference.Model{URI: "/models/tiny", Name: "tiny"},
		Image: "vllm/vllm-openai:v0.9.1", Args: args, Env: []inference.EnvVar{{Name: "ENGINE_SETTING", Value: "on"}},
		Replicas: inference.ReplicaRange{Max: 4}}
}

func (h *servingHarness) layout(revs ...activities.RevisionLayout) activities.ApplyEndpointLayoutRequest {
	req := activities.ApplyEndpointLayoutRequest{EndpointRef: h.ref, Revisions: revs}
	for _, r := range revs {
		req.Traffic = append(req.Traffic, inference.RevisionWeight{Revision: r.Revision, Weight: 100 / len(revs)})
	}
	return req
}

func (h *servingHarness) apply(req activities.ApplyEndpointLayoutRequest) (activities.ApplyEndpointLayoutResult, error) {
	h.t.Helper()
	v, err := h.env.ExecuteActivity(activities.ApplyEndpointLayoutName, req)
	var res activities.ApplyEndpointLayoutResult
	if err == nil {
		if err := v.Get(&res); err != nil {
			h.t.Fatal(err)
		}
	}
	return res, err
}

func (h *servingHarness) mustApply(req activities.ApplyEndpointLayoutRequest) {
	h.t.Helper()
	res, err := h.apply(req)
	if err != nil {
		h.t.Fatal(err)
	}
	if res.TrafficMode != TrafficModeProxy {
		h.t.Fatalf("traffic mode %q, want %q", res.TrafficMode, TrafficModeProxy)
	}
}

func (h *servingHarness) observe(backend inference.Backend, revs ...int) activities.ObserveEndpointResult {
	h.t.Helper()
	v, err := h.env.ExecuteActivity(activities.ObserveEndpointName, activities.ObserveEndpointRequest{EndpointRef: h.ref, Backend: backend, Revisions: revs})
	if err != nil {
		h.t.Fatal(err)
	}
	var res activities.ObserveEndpointResult
	if err := v.Get(&res); err != nil {
		h.t.Fatal(err)
	}
	return res
}

// observeUntil observes revision rev until ok accepts it.
func (h *servingHarness) observeUntil(backend inference.Backend, rev int, what string, ok func(activities.RevisionObservation) bool) activities.RevisionObservation {
	h.t.Helper()
	var last activities.RevisionObservation
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		last = h.observe(backend, rev).Revisions[0]
		if ok(last) {
			return last
		}
	}
	h.t.Fatalf("revision %d never %s; last observation %+v", rev, what, last)
	return last
}

// pids are the engine processes of a revision, by replica name.
func (h *servingHarness) pids(rev int) map[string]int {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	out := map[string]int{}
	if ep := h.s.endpoints[h.ref]; ep != nil && ep.revisions[rev] != nil {
		for _, rp := range ep.revisions[rev].replicas {
			rp.mu.Lock()
			out[rp.name] = rp.pid
			rp.mu.Unlock()
		}
	}
	return out
}

func TestEndpointReplicasServeScaleAndDelete(t *testing.T) {
	t.Setenv("ATELIER_TEST_WORKER_SECRET", "hunter2")
	h := withModelserver(t)
	spec := vllmEndpoint("--startup-delay", "200ms")
	h.mustApply(h.layout(activities.RevisionLayout{Revision: 1, Spec: spec, Replicas: 2}))

	o := h.observeUntil(inference.BackendVLLM, 1, "became ready with queue signals", func(o activities.RevisionObservation) bool {
		return o.Status.Ready == 2 && len(o.Queue) == 2
	})
	if o.Replicas != 2 || len(o.URLs) != 2 || o.URLs[0] == o.URLs[1] || o.Status.CrashLooping != 0 || o.Waiting != "" {
		t.Fatalf("observation %+v", o)
	}
	for _, q := range o.Queue {
		if !q.Signal.Known || q.Replica == "" {
			t.Errorf("queue observation %+v: want a known signal of a named replica", q)
		}
	}
	for _, st := range o.Status.Startup {
		if st.Created.IsZero() || st.Scheduled.IsZero() || st.ImagePulled.IsZero() || st.EngineReady.IsZero() || st.EngineReady.Before(st.ImagePulled) {
			t.Errorf("startup milestones %+v", st)
		}
	}
	for _, u := range o.URLs {
		resp, err := http.Post(u+"/v1/completions", "application/json", strings.NewReader(`{"model":"tiny","prompt":"hi"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("completion at %s: %s", u, resp.Status)
		}
	}
	before := h.pids(1)
	if len(before) != 2 {
		t.Fatalf("pids %v", before)
	}
	// The engine sees the spec's env and the runtime's, not the worker's.
	if environ, err := os.ReadFile("/proc/" + strconv.Itoa(before["chat-r1-0"]) + "/environ"); err == nil {
		vars := strings.Split(string(bytes.TrimRight(environ, "\x00")), "\x00")
		for _, want := range []string{"ENGINE_SETTING=on", "ATELIER_ENDPOINT=chat", "ATELIER_REVISION=1", "ATELIER_REPLICA=chat-r1-0"} {
			if !slices.Contains(vars, want) {
				t.Errorf("replica env lacks %s: %v", want, vars)
			}
		}
		if slices.ContainsFunc(vars, func(v string) bool { return strings.HasPrefix(v, "ATELIER_TEST_WORKER_SECRET=") }) {
			t.Error("the worker's environment leaked into the replica")
		}
	}
	if b, err := os.ReadFile(filepath.Join(h.data, "endpoints", "proj", "chat", "r1", "chat-r1-0.log")); err != nil || !strings.Contains(string(b), "listening") {
		t.Errorf("replica log: %v\n%s", err, b)
	}

	// The same layout again changes nothing.
	h.mustApply(h.layout(activities.RevisionLayout{Revision: 1, Spec: spec, Replicas: 2}))
	if after := h.pids(1); !maps.Equal(before, after) {
		t.Fatalf("a repeated apply replaced replicas: %v then %v", before, after)
	}

	// 2 → 1: the newest goes, its process group with it.
	h.mustApply(h.layout(activities.RevisionLayout{Revision: 1, Spec: spec, Replicas: 1}))
	groupGone(t, before["chat-r1-1"], 10*time.Second)
	if after := h.pids(1); len(after) != 1 || after["chat-r1-0"] != before["chat-r1-0"] {
		t.Fatalf("after scaling to 1: %v (before %v)", after, before)
	}
	if o := h.observe(inference.BackendVLLM, 1).Revisions[0]; o.Replicas != 1 || o.Status.Ready != 1 || len(o.URLs) != 1 {
		t.Fatalf("after scaling to 1: %+v", o)
	}

	// A second revision beside the first, then the first deleted alone.
	h.mustApply(h.layout(activities.RevisionLayout{Revision: 1, Spec: spec, Replicas: 1}, activities.RevisionLayout{Revision: 2, Spec: vllmEndpoint(), Replicas: 1}))
	h.observeUntil(inference.BackendVLLM, 2, "became ready", func(o activities.RevisionObservation) bool { return o.Status.Ready == 1 })
	rev2 := h.pids(2)["chat-r2-0"]
	if _, err := h.env.ExecuteActivity(activities.DeleteEndpointRevisionsName, activities.DeleteEndpointRevisionsRequest{EndpointRef: h.ref, Revisions: []int{1}}); err != nil {
		t.Fatal(err)
	}
	groupGone(t, before["chat-r1-0"], 10*time.Second)
	if err := syscall.Kill(rev2, 0); err != nil {
		t.Fatalf("deleting revision 1 touched revision 2: %v", err)
	}
	if o := h.observe(inference.BackendVLLM, 1).Revisions[0]; o.Replicas != 0 || o.Status.Ready != 0 || len(o.URLs) != 0 {
		t.Fatalf("a deleted revision: %+v", o)
	}

	// Deleting the endpoint kills the rest; the logs stay.
	if _, err := h.env.ExecuteActivity(activities.DeleteEndpointName, h.ref); err != nil {
		t.Fatal(err)
	}
	groupGone(t, rev2, 10*time.Second)
	if _, err := os.Stat(filepath.Join(h.data, "endpoints", "proj", "chat", "r2", "chat-r2-0.log")); err != nil {
		t.Errorf("the log of a deleted endpoint: %v", err)
	}
}

func TestEndpointTritonReplica(t *testing.T) {
	h := withModelserver(t)
	spec := inference.EndpointSpec{Backend: inference.BackendTriton, Model: inference.Model{URI: "/models", Name: "resnet"},
		Image: "nvcr.io/nvidia/tritonserver:25.04-py3", Replicas: inference.ReplicaRange{Max: 2}}
	h.mustApply(h.layout(activities.RevisionLayout{Revision: 1, Spec: spec, Replicas: 1}))
	o := h.observeUntil(inference.BackendTriton, 1, "became ready with a queue signal", func(o activities.RevisionObservation) bool {
		return o.Status.Ready == 1 && len(o.Queue) == 1 && o.Queue[0].Signal.Known
	})
	resp, err := http.Get(o.URLs[0] + "/v2/models/resnet/ready")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("model ready at %s: %s", o.URLs[0], resp.Status)
	}
}

func TestEndpointCrashLoop(t *testing.T) {
	h := withModelserver(t)
	h.mustApply(h.layout(activities.RevisionLayout{Revision: 1, Spec: vllmEndpoint("--crash-after", "300ms"), Replicas: 1}))
	o := h.observeUntil(inference.BackendVLLM, 1, "crash-looped", func(o activities.RevisionObservation) bool {
		return o.Status.CrashLooping == 1
	})
	for _, want := range []string{"CrashLoopBackOff", "chat-r1-0", "exited with code 3", "injected crash"} {
		if !strings.Contains(o.Waiting, want) {
			t.Errorf("waiting %q lacks %q", o.Waiting, want)
		}
	}
	if o.Replicas != 1 {
		t.Errorf("a crash-looping replica still counts: %+v", o)
	}
}

func TestEndpointEngineMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no vllm there
	h := newServingHarness(t, nil)
	_, err := h.apply(h.layout(activities.RevisionLayout{Revision: 1, Spec: vllmEndpoint(), Replicas: 1}))
	e := appError(t, err, activities.ErrTypeInvalidStep)
	for _, want := range []string{"the vllm engine is not installed on this worker", "pip install vllm", "--local-engine vllm=<path>"} {
		if !strings.Contains(e.Error(), want) {
			t.Errorf("error %q lacks %q", e.Error(), want)
		}
	}
	if _, err := os.Stat(filepath.Join(h.data, "endpoints")); !os.IsNotExist(err) {
		t.Errorf("a refused layout created directories: %v", err)
	}
	// Zero replicas need no engine.
	h.mustApply(h.layout(activities.RevisionLayout{Revision: 1, Spec: vllmEndpoint(), Replicas: 0}))

	h = newServingHarness(t, nil, WithEngines(map[inference.Backend]string{inference.BackendVLLM: "/nonexistent/vllm"}))
	_, err = h.apply(h.layout(activities.RevisionLayout{Revision: 1, Spec: vllmEndpoint(), Replicas: 1}))
	if e := appError(t, err, activities.ErrTypeInvalidStep); !strings.Contains(e.Error(), "--local-engine vllm=/nonexistent/vllm does not exist") {
		t.Errorf("error %q does not name the configured path", e.Error())
	}
}

func TestEndpointRefusesBadLayouts(t *testing.T) {
	h := newServingHarness(t, []Option{WithGPUs(NewGPUSet(nil, ErrNoNvidiaSMI))},
		WithEngines(map[inference.Backend]string{inference.BackendVLLM: "/bin/true"}))
	gpuSpec := vllmEndpoint()
	gpuSpec.Resources = inference.Resources{GPUs: 1, GPUType: "NVIDIA-L4"}
	unknown := vllmEndpoint()
	unknown.Backend = "tgi"
	for _, tc := range []struct {
		name string
		req  activities.ApplyEndpointLayoutRequest
		want string
	}{
		{"unknown backend", h.layout(activities.RevisionLayout{Revision: 1, Spec: unknown, Replicas: 1}), `unknown backend "tgi"`},
		{"negative replicas", h.layout(activities.RevisionLayout{Revision: 1, Spec: vllmEndpoint(), Replicas: -1}), "must not be negative"},
		{"revision 0", h.layout(activities.RevisionLayout{Revision: 0, Spec: vllmEndpoint(), Replicas: 1}), "1 or more"},
		{"a path as endpoint name", activities.ApplyEndpointLayoutRequest{EndpointRef: activities.EndpointRef{Project: "proj", Endpoint: "../x"}}, "cannot name a directory"},
		{"more GPUs than the machine has", h.layout(activities.RevisionLayout{Revision: 1, Spec: gpuSpec, Replicas: 1}), "each replica of revision 1 needs 1 NVIDIA-L4 GPU(s) but this worker's machine has 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.apply(tc.req)
			if e := appError(t, err, activities.ErrTypeInvalidStep); !strings.Contains(e.Error(), tc.want) {
				t.Errorf("error %q lacks %q", e.Error(), tc.want)
			}
		})
	}
}

func TestCloseStopsReplicas(t *testing.T) {
	h := withModelserver(t)
	h.mustApply(h.layout(activities.RevisionLayout{Revision: 1, Spec: vllmEndpoint(), Replicas: 1}))
	h.observeUntil(inference.BackendVLLM, 1, "became ready", func(o activities.RevisionObservation) bool { return o.Status.Ready == 1 })
	pid := h.pids(1)["chat-r1-0"]
	h.s.Close()
	groupGone(t, pid, 10*time.Second)
	if _, err := h.apply(h.layout(activities.RevisionLayout{Revision: 1, Spec: vllmEndpoint(), Replicas: 1})); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("apply after Close: %v", err)
	}
}

func TestEngineArgs(t *testing.T) {
	spec := vllmEndpoint("--max-model-len", "4096")
	got := engineArgs(engines[inference.BackendVLLM], spec, replicaPorts{http: 9001})
	want := []string{"serve", "--model", "/models/tiny", "--served-model-name", "tiny", "--max-model-len", "4096", "--host", "127.0.0.1", "--port", "9001"}
	if !slices.Equal(got, want) {
		t.Errorf("vllm args\n got %q\nwant %q", got, want)
	}
	triton := inference.EndpointSpec{Backend: inference.BackendTriton, Model: inference.Model{URI: "/m", Name: "r"}}
	got = engineArgs(engines[inference.BackendTriton], triton, replicaPorts{http: 1, grpc: 2, metrics: 3})
	want = []string{"--model-repository=/m", "--model-control-mode=explicit", "--load-model=r",
		"--http-address", "127.0.0.1", "--http-port", "1", "--grpc-address", "127.0.0.1", "--grpc-port", "2",
		"--metrics-address", "127.0.0.1", "--metrics-port", "3"}
	if !slices.Equal(got, want) {
		t.Errorf("triton args\n got %q\nwant %q", got, want)
	}
	info, _ := inference.Info(inference.BackendTriton)
	p, err := portsFor(info)
	if err != nil || p.http == 0 || p.grpc == 0 || p.metrics == 0 || p.http == p.grpc || p.grpc == p.metrics || p.http == p.metrics {
		t.Errorf("triton ports %+v, %v: want three distinct ones", p, err)
	}
}

func TestEndpointReplacesAKilledEngine(t *testing.T) {
	h := withModelserver(t)
	h.mustApply(h.layout(activities.RevisionLayout{Revision: 1, Spec: vllmEndpoint(), Replicas: 1}))
	h.observeUntil(inference.BackendVLLM, 1, "became ready", func(o activities.RevisionObservation) bool { return o.Status.Ready == 1 })
	first := h.pids(1)["chat-r1-0"]
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	o := h.observeUntil(inference.BackendVLLM, 1, "served again by a new process", func(o activities.RevisionObservation) bool {
		pid := h.pids(1)["chat-r1-0"]
		return o.Status.Ready == 1 && pid != 0 && pid != first
	})
	if o.Replicas != 1 || o.Status.CrashLooping != 0 {
		t.Errorf("one exit is no crash loop: %+v", o)
	}
}

func TestEndpointReplicasShareTheMachinesGPUs(t *testing.T) {
	bin := modelserver(t)
	l4 := NewGPUSet([]GPU{{Index: 0, Product: "NVIDIA-L4"}}, nil)
	h := newServingHarness(t, []Option{WithGPUs(l4)}, WithEngines(map[inference.Backend]string{inference.BackendVLLM: bin}))
	spec := vllmEndpoint()
	spec.Resources = inference.Resources{GPUs: 1, GPUType: "NVIDIA-L4"}
	h.mustApply(h.layout(activities.RevisionLayout{Revision: 1, Spec: spec, Replicas: 2}))
	o := h.observeUntil(inference.BackendVLLM, 1, "had one replica ready and one waiting for the GPU", func(o activities.RevisionObservation) bool {
		return o.Status.Ready == 1 && strings.Contains(o.Waiting, "waiting for local GPUs")
	})
	// Both replicas start at once: either may win the GPU.
	holder := "chat-r1-0"
	if strings.Contains(o.Waiting, "GPU 0 by endpoint proj/chat-r1-1") {
		holder = "chat-r1-1"
	}
	if o.Replicas != 2 || !strings.Contains(o.Waiting, "GPU 0 by endpoint proj/"+holder) {
		t.Errorf("observation %+v", o)
	}
	if environ, err := os.ReadFile("/proc/" + strconv.Itoa(h.pids(1)[holder]) + "/environ"); err == nil && !bytes.Contains(environ, []byte("CUDA_VISIBLE_DEVICES=0\x00")) {
		t.Errorf("the replica holding GPU 0 does not see it: %q", environ)
	}
	// Scaling down to the replica that holds the GPU keeps it serving.
	h.mustApply(h.layout(activities.RevisionLayout{Revision: 1, Spec: spec, Replicas: 1}))
	if o := h.observe(inference.BackendVLLM, 1).Revisions[0]; o.Replicas != 1 || o.Status.Ready != 1 || o.Waiting != "" {
		t.Errorf("after scaling down: %+v", o)
	}
}

func TestRestartedWorkerServesTheRecordedLayout(t *testing.T) {
	h := withModelserver(t)
	h.mustApply(h.layout(activities.RevisionLayout{Revision: 1, Spec: vllmEndpoint(), Replicas: 2}))
	h.observeUntil(inference.BackendVLLM, 1, "became ready", func(o activities.RevisionObservation) bool { return o.Status.Ready == 2 })
	before := h.pids(1)

	// What a killed worker leaves: an engine's child in the replica's
	// process group, with its environment, and a group whose id was
	// recycled by something else since.
	revDir := filepath.Join(h.data, "endpoints", "proj", "chat", "r1")
	sleep := func(env []string, replica string) *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if err := writePidFile(filepath.Join(revDir, replica+".pid"), cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	leftover := sleep(replicaMarker(h.ref, "chat-r1-7"), "chat-r1-7")
	foreign := sleep([]string{"SOMEONE=else"}, "chat-r1-8")
	leftoverDone := make(chan struct{})
	go func() { _ = leftover.Wait(); close(leftoverDone) }()

	h.restart()
	for _, pid := range before {
		groupGone(t, pid, 10*time.Second)
	}
	// The workflow only observes (its layout did not change): that is
	// enough for the replicas to come back.
	o := h.observeUntil(inference.BackendVLLM, 1, "served again after the restart", func(o activities.RevisionObservation) bool { return o.Status.Ready == 2 })
	if o.Replicas != 2 {
		t.Fatalf("after the restart: %+v", o)
	}
	select {
	case <-leftoverDone:
	case <-time.After(10 * time.Second):
		t.Error("the previous worker's leftover process still runs")
	}
	if err := syscall.Kill(foreign.Process.Pid, 0); err != nil {
		t.Errorf("a process that only reused a recorded group id was killed: %v", err)
	}

	// A deleted endpoint is forgotten: the next worker starts nothing.
	if _, err := h.env.ExecuteActivity(activities.DeleteEndpointName, h.ref); err != nil {
		t.Fatal(err)
	}
	h.restart()
	if o := h.observe(inference.BackendVLLM, 1).Revisions[0]; o.Replicas != 0 {
		t.Errorf("a deleted endpoint came back: %+v", o)
	}
}

func TestRestartedWorkerWaitsForAMissingEngine(t *testing.T) {
	engine := filepath.Join(t.TempDir(), "vllm")
	if err := os.Symlink(modelserver(t), engine); err != nil {
		t.Fatal(err)
	}
	h := newServingHarness(t, nil, WithEngines(map[inference.Backend]string{inference.BackendVLLM: engine}))
	h.mustApply(h.layout(activities.RevisionLayout{Revision: 1, Spec: vllmEndpoint(), Replicas: 1}))
	h.observeUntil(inference.BackendVLLM, 1, "became ready", func(o activities.RevisionObservation) bool { return o.Status.Ready == 1 })

	// The worker comes back without its engine: the revision says why it
	// has no replicas, and starts them once the engine is there again.
	if err := os.Remove(engine); err != nil {
		t.Fatal(err)
	}
	h.restart()
	o := h.observe(inference.BackendVLLM, 1).Revisions[0]
	if o.Replicas != 0 || !strings.Contains(o.Waiting, "cannot start the replicas again after the worker restarted") || !strings.Contains(o.Waiting, "not installed") {
		t.Fatalf("without the engine: %+v", o)
	}
	if err := os.Symlink(modelserver(t), engine); err != nil {
		t.Fatal(err)
	}
	o = h.observeUntil(inference.BackendVLLM, 1, "served once the engine was back", func(o activities.RevisionObservation) bool { return o.Status.Ready == 1 })
	if o.Waiting != "" {
		t.Errorf("a stale reason: %+v", o)
	}
}
