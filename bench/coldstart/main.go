// Command coldstart measures scale from zero end to end on the local
// runtime: a gateway and a worker in-process on a Temporal dev server and
// Postgres, the endpoint's replicas real examples/modelserver processes
// (standing in for vLLM through --local-engine, with a configurable model
// load time), every request through the gateway's endpoint proxy.
//
// Each round waits for the endpoint to scale to zero (its idle timeout,
// 30 s, is the shortest allowed), then sends a burst of requests at once
// with a deadline far above the cold start and records, for each, the
// time to its answer and whether it failed. The baseline, measured in the
// same run, is the engine's own cold start: the same binary started by
// hand, from exec to the model listed on /v1/models. The difference is
// what Atelier adds: noticing the held requests, deciding, starting the
// process, observing it ready and forwarding.
//
// See bench/doc.go and docs/benchmarks.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"time"

	"github.com/atelier-ml/atelier/bench/internal/benchstack"
	"github.com/atelier-ml/atelier/internal/process/config"
)

// targetOverhead is the bound on Atelier's part of a cold start.
const targetOverhead = 5 * time.Second

func main() {
	rounds := flag.Int("rounds", 5, "cold starts measured")
	burst := flag.Int("burst", 5, "requests sent at once to the endpoint at zero")
	load := flag.Duration("load", 2*time.Second, "the fake engine's model load time")
	quick := flag.Bool("quick", false, "smoke run: -rounds 2")
	flag.Parse()
	if *quick {
		*rounds = 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *rounds, *burst, *load); err != nil {
		fmt.Fprintln(os.Stderr, "coldstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, rounds, burst int, load time.Duration) error {
	dir, err := os.MkdirTemp("", "atelier-coldstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The replica runs as the step user when the bench runs as root.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	engine := filepath.Join(dir, "modelserver")
	benchstack.Logf("building examples/modelserver")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", engine, "./examples/modelserver/cmd/modelserver").CombinedOutput(); err != nil {
		return fmt.Errorf("go build modelserver: %v: %s", err, out)
	}
	st, err := benchstack.Start(ctx, benchstack.Options{Name: "coldstart", Worker: true, Gateway: true,
		Configure: func(c *config.Config) { c.LocalEngines = map[string]string{"vllm": engine} }})
	if err != nil {
		return err
	}
	defer st.Close()
	st.Info.Print(os.Stdout)
	token, err := st.Bootstrap(ctx, "bench")
	if err != nil {
		return err
	}
	c := &client{base: st.URL + "/v1/projects/bench/endpoints", token: token}

	var baseline []time.Duration
	for i := range rounds {
		benchstack.Logf("baseline %d: the engine alone", i+1)
		d, err := engineColdStart(ctx, engine, load)
		if err != nil {
			return err
		}
		baseline = append(baseline, d)
	}

	spec := map[string]any{"backend": "vllm", "model": map[string]any{"name": "tiny"}, "image": "vllm/vllm-openai:v0.9.1",
		"env":         []map[string]string{{"name": "ATELIER_FAKE_STARTUP_DELAY", "value": load.String()}},
		"replicas":    map[string]any{"min": 0, "max": 2},
		"autoscaling": map[string]any{"stableWindow": "6s", "scaleDownDelay": "1s", "idleTimeout": "30s"},
		"rollout":     map[string]any{"gates": map[string]any{"maxErrorRate": 1}}}
	if code, body := c.do(ctx, "POST", "", map[string]any{"name": "chat", "spec": spec}); code != 201 {
		return fmt.Errorf("create endpoint: %d %s", code, body)
	}
	defer c.do(context.Background(), "DELETE", "/chat", nil)

	var first, all []time.Duration
	failed := 0
	for i := range rounds {
		benchstack.Logf("round %d: waiting for zero replicas (idle timeout 30 s)", i+1)
		if err := c.waitZero(ctx); err != nil {
			return err
		}
		times, fails := c.burst(ctx, burst)
		failed += fails
		if len(times) > 0 {
			first = append(first, slicesMin(times))
		}
		all = append(all, times...)
	}
	b, f, a := benchstack.Summarize(baseline), benchstack.Summarize(first), benchstack.Summarize(all)
	fmt.Printf("engine cold start alone (exec → model listed, load %s), %d runs: p50 %s, p90 %s, max %s ms\n",
		load, b.N, benchstack.Ms(b.P50), benchstack.Ms(b.P90), benchstack.Ms(b.Max))
	fmt.Printf("through Atelier at zero replicas, first answer of a burst of %d, %d rounds: p50 %s, p90 %s, max %s ms (%s the engine alone at p50)\n",
		burst, f.N, benchstack.Ms(f.P50), benchstack.Ms(f.P90), benchstack.Ms(f.Max), benchstack.Ratio(float64(f.P50), float64(b.P50)))
	fmt.Printf("every request of the bursts, %d: p50 %s, max %s ms; failed: %d (deadline 2 min)\n",
		a.N, benchstack.Ms(a.P50), benchstack.Ms(a.Max), failed)
	over := f.P50 - b.P50
	fmt.Printf("Atelier's part of a cold start (p50 first answer − p50 engine alone): %s ms (target ≤ %s: %s)\n",
		benchstack.Ms(over), targetOverhead, benchstack.Verdict(over <= targetOverhead))
	return nil
}

func slicesMin(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d[1:] {
		m = min(m, x)
	}
	return m
}

// engineColdStart starts the engine by hand and times exec → model listed.
func engineColdStart(ctx context.Context, engine string, load time.Duration) (time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	start := time.Now()
	cmd := exec.CommandContext(ctx, engine, "--model", "tiny", "--port", fmt.Sprint(port))
	cmd.Env = append(os.Environ(), "ATELIER_FAKE_STARTUP_DELAY="+load.String())
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for deadline := start.Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/models", port))
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == 200 && bytes.Contains(body, []byte(`"tiny"`)) {
			return time.Since(start), nil
		}
	}
	return 0, fmt.Errorf("the engine never listed its model")
}

type client struct{ base, token string }

func (c *client) do(ctx context.Context, method, path string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// waitZero waits until the endpoint's serving revision has no replica.
func (c *client) waitZero(ctx context.Context) error {
	var body []byte
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var code int
		code, body = c.do(ctx, "GET", "/chat", nil)
		if code != 200 {
			continue
		}
		var v struct {
			Stable   int `json:"stable"`
			Observed []struct {
				Revision, Replicas int
			} `json:"observed"`
		}
		if json.Unmarshal(body, &v) != nil || v.Stable == 0 {
			continue
		}
		for _, o := range v.Observed {
			if o.Revision == v.Stable && o.Replicas == 0 {
				return nil
			}
		}
	}
	return fmt.Errorf("the endpoint never scaled to zero; its last state: %s", body)
}

// burst sends n completions at once; it answers each success's latency
// and the number of failures.
func (c *client) burst(ctx context.Context, n int) ([]time.Duration, int) {
	var mu sync.Mutex
	var times []time.Duration
	fails := 0
	var wg sync.WaitGroup
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			code, body := c.do(rctx, "POST", "/chat/v1/completions", map[string]any{"model": "tiny", "prompt": "hi"})
			mu.Lock()
			defer mu.Unlock()
			if code != 200 {
				fails++
				benchstack.Logf("request failed: %d %s", code, body)
				return
			}
			times = append(times, time.Since(start))
		}()
	}
	wg.Wait()
	return times, fails
}
