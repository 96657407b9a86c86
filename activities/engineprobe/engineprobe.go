package engineprobe

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/atelier-ml/atelier/inference"
)

// Limits of one Send.
const (
	// MaxPerCall bounds the probes of one call: a rollout asks again at
	// its next observation for what is still missing.
	MaxPerCall = 100
	// parallelism bounds the probes in flight.
	parallelism = 4
	// timeout bounds one probe.
	timeout = 10 * time.Second
)

// Send sends n probes (at most MaxPerCall) to the replicas at urls in
// turn and counts their answers.
func Send(ctx context.Context, c *http.Client, backend inference.Backend, model string, urls []string, n int) inference.RevisionTraffic {
	var out inference.RevisionTraffic
	n = min(n, MaxPerCall)
	if n <= 0 || len(urls) == 0 {
		return out
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, parallelism)
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			status, d, ok := probe(ctx, c, backend, model, urls[i%len(urls)])
			if !ok {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			out.Requests++
			if status >= 500 {
				out.Errors++
			}
			out.Latency.Observe(d)
		})
	}
	wg.Wait()
	return out
}

// probe sends one request; ok is false when no answer came.
func probe(ctx context.Context, c *http.Client, backend inference.Backend, model, base string) (int, time.Duration, bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var req *http.Request
	var err error
	switch backend {
	case inference.BackendTriton:
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v2/models/%s/ready", base, model), nil)
	default:
		body := fmt.Sprintf(`{"model":%q,"prompt":"ping","max_tokens":1}`, model)
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
		if req != nil {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	if err != nil {
		return 0, 0, false
	}
	req.Header.Set("User-Agent", "atelier-probe")
	start := time.Now()
	res, err := c.Do(req)
	if err != nil {
		return 0, 0, false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
	res.Body.Close()
	return res.StatusCode, time.Since(start), true
}
