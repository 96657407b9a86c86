package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The binary as integration tests run it: built once, started with flags
// and ATELIER_FAKE_* variables, listening on a port it reports on stderr.

func build(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the command")
	}
	bin := filepath.Join(t.TempDir(), "modelserver")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var listening = regexp.MustCompile(`msg=listening addr=(\S+)`)

// launch starts the binary and returns it with the base URLs of its n
// listeners, once they are up.
func launch(t *testing.T, bin string, n int, env []string, args ...string) (*exec.Cmd, []string) {
	t.Helper()
	return start(t, bin, n, env, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
}

// start is launch with the command line as given.
func start(t *testing.T, bin string, n int, env []string, args ...string) (*exec.Cmd, []string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addrs := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrs <- "http://" + m[1]:
				default:
				}
			}
		}
	}()
	var urls []string
	for len(urls) < n {
		select {
		case a := <-addrs:
			urls = append(urls, a)
		case <-time.After(30 * time.Second):
			t.Fatal("the server did not report its addresses")
		}
	}
	return cmd, urls
}

func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not exit")
		return -1
	}
}

func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestCommand(t *testing.T) {
	bin := build(t)

	t.Run("SIGTERM drains and exits 0", func(t *testing.T) {
		cmd, urls := launch(t, bin, 1, []string{"ATELIER_FAKE_REVISION=r5", "ATELIER_FAKE_SERVICE_TIME=500ms"})
		url := urls[0]
		answered := make(chan int, 1)
		go func() {
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
			if err != nil {
				answered <- -1
				return
			}
			resp.Body.Close()
			answered <- resp.StatusCode
		}()
		deadline := time.Now().Add(30 * time.Second)
		for { // until the request is running
			if _, _, body := get(t, url+"/admin/faults"); strings.Contains(body, `"running":1`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the request never ran")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := waitExit(t, cmd); code != 0 {
			t.Errorf("exit %d after SIGTERM", code)
		}
		if got := <-answered; got != http.StatusOK {
			t.Errorf("request in flight at SIGTERM: %d", got)
		}
	})

	t.Run("Triton with a metrics listener; an injected crash exits 3", func(t *testing.T) {
		cmd, urls := launch(t, bin, 2, nil, "-backend", "triton", "-metrics-addr", "127.0.0.1:0", "-revision", "r6")
		url := urls[0]
		status, header, _ := get(t, url+"/v2/health/ready")
		if status != 200 || header.Get("X-Model-Revision") != "r6" {
			t.Errorf("ready: %d, revision %q", status, header.Get("X-Model-Revision"))
		}
		if status, _, _ := get(t, url+"/metrics"); status != http.StatusNotFound {
			t.Errorf("metrics on the main listener: %d", status)
		}
		if status, _, body := get(t, urls[1]+"/metrics"); status != 200 || !strings.Contains(body, "nv_inference_pending_request_count{") {
			t.Errorf("metrics listener: %d\n%s", status, body)
		}
		resp, err := http.Post(url+"/admin/faults", "application/json", strings.NewReader(`{"crash_after":"50ms"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if code := waitExit(t, cmd); code != 3 {
			t.Errorf("exit %d after an injected crash, want 3", code)
		}
	})

	t.Run("vLLM's command line", func(t *testing.T) {
		_, urls := start(t, bin, 1, nil, "serve", "--model", "/models/tiny", "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", "0", "--startup-delay", "0s")
		if status, _, body := get(t, urls[0]+"/v1/models"); status != 200 || !strings.Contains(body, `"id":"tiny"`) {
			t.Errorf("/v1/models: %d %s", status, body)
		}
		if status, _, body := get(t, urls[0]+"/metrics"); status != 200 || !strings.Contains(body, "vllm:num_requests_waiting{") {
			t.Errorf("/metrics: %d", status)
		}
	})

	t.Run("weights at a local path are loaded", func(t *testing.T) {
		weights := filepath.Join(t.TempDir(), "model.bin")
		if err := os.WriteFile(weights, []byte("weights v2"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, urls := start(t, bin, 1, nil, "serve", "--model", weights, "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", "0", "--startup-delay", "0s")
		// sha256("weights v2")
		want := "sha256:" + fmt.Sprintf("%x", sha256.Sum256([]byte("weights v2")))
		if _, h, _ := get(t, urls[0]+"/v1/models"); h.Get("X-Model-Weights") != want {
			t.Errorf("X-Model-Weights = %q, want %q", h.Get("X-Model-Weights"), want)
		}
	})

	t.Run("Triton's command line", func(t *testing.T) {
		_, urls := start(t, bin, 2, nil, "--model-repository=/models", "--model-control-mode=explicit", "--load-model=resnet",
			"--http-address", "127.0.0.1", "--http-port", "0", "--grpc-port", "0", "--metrics-address", "127.0.0.1", "--metrics-port", "0")
		if status, _, _ := get(t, urls[0]+"/v2/models/resnet/ready"); status != 200 {
			t.Errorf("model ready: %d", status)
		}
		if status, _, body := get(t, urls[1]+"/metrics"); status != 200 || !strings.Contains(body, `nv_inference_pending_request_count{model="resnet"`) {
			t.Errorf("metrics listener: %d\n%s", status, body)
		}
	})

	t.Run("a stray argument exits 1", func(t *testing.T) {
		out, err := exec.Command(bin, "-addr", "127.0.0.1:0", "extra").CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "unexpected argument") {
			t.Errorf("%v: %s", err, out)
		}
	})

	t.Run("a bad variable exits 1", func(t *testing.T) {
		cmd := exec.CommandContext(context.Background(), bin)
		cmd.Env = append(os.Environ(), "ATELIER_FAKE_ERROR_RATE=lots")
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), "ATELIER_FAKE_ERROR_RATE") {
			t.Errorf("exit %d: %s", code, out)
		}
	})
}
