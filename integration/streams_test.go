package integration

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/tokens"
)

// openStream opens an SSE or log-follow stream and returns its response
// (body unread), or the status code of a refusal.
func (s *stack) openStream(ctx context.Context, path, token string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", s.url+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return http.DefaultClient.Do(req)
}

// metric reads one sample of the gateway's /metrics.
func (s *stack) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			require.NoError(t, err)
			return v
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// Seen by a user: every SSE and log-follow stream polled Postgres and
// Temporal on its own, without bound, so a thousand streams from one viewer
// starved every tenant. Streams of one run share one poller, and a token
// past its stream limit gets 429 while other tokens are unaffected.
func TestStreamsShareOnePollerAndAreLimitedPerToken(t *testing.T) {
	const limit = 12
	s := newStack(t, stackOptions{streamLimit: limit})
	dir := stepScratchDir(t)
	s.createPipeline("blocking", blockingPipeline(dir))
	id := s.startRun(map[string]any{"pipeline": "blocking"})
	waitFile(t, dir+"/pid", 30*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < limit; i++ {
		path := s.path("/runs/%s/events", id)
		if i%2 == 1 {
			path = s.path("/runs/%s/steps/block/logs?attempt=1&follow=true", id)
		}
		resp, err := s.openStream(ctx, path, s.token)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode, path)
		go func() { _, _ = io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
	}
	require.Eventually(t, func() bool { return s.metric(t, "atelier_streams_open") == limit }, 5*time.Second, 50*time.Millisecond)

	before := s.metric(t, "atelier_stream_status_polls_total")
	time.Sleep(3 * time.Second)
	polls := s.metric(t, "atelier_stream_status_polls_total") - before
	t.Logf("%d streams on one run: %.0f status polls in 3 s", limit, polls)
	assert.LessOrEqual(t, polls, 5.0, "one poller per run (1 s interval), not one per stream")
	assert.GreaterOrEqual(t, polls, 1.0, "the shared poller runs")

	// The token's next stream is refused; another token's is not.
	resp, err := s.openStream(ctx, s.path("/runs/%s/events", id), s.token)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 429, resp.StatusCode, "%s", body)
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))

	secret, hash := tokens.New()
	_, err = s.store.CreateToken(context.Background(), catalog.Token{Name: "other-viewer", Project: s.project, Role: catalog.RoleViewer}, hash)
	require.NoError(t, err)
	resp, err = s.openStream(ctx, s.path("/runs/%s/events", id), secret)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)

	// Closing streams frees their slots.
	cancel()
	require.Eventually(t, func() bool { return s.metric(t, "atelier_streams_open") == 0 }, 10*time.Second, 50*time.Millisecond)
	resp, err = s.openStream(context.Background(), s.path("/runs/%s/events", id), s.token)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	require.Equal(t, 202, s.do("POST", s.path("/runs/%s/cancel", id), map[string]any{"reason": "done"}, nil))
}
