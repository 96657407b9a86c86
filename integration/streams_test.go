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

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

// openEvents opens run id's event stream with the token secret through
// the plain client, whose response body is left unread (a stream), as
// `atelier run --watch` opens it.
func (s *stack) openEvents(ctx context.Context, id, secret string) *http.Response {
	s.t.Helper()
	resp, err := s.clientAs(secret).StreamRunEvents(ctx, s.project, id, nil)
	require.NoError(s.t, err)
	return resp
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
	id := s.start("blocking", nil)
	waitFile(t, dir+"/pid", 30*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < limit; i++ {
		var resp *http.Response
		if i%2 == 0 {
			resp = s.openEvents(ctx, id, s.token)
		} else { // a followed log counts as a stream too
			var err error
			resp, err = s.client().GetStepLogs(ctx, s.project, id, "block", &gen.GetStepLogsParams{Attempt: ptrTo(1), Follow: ptrTo(true)})
			require.NoError(t, err)
		}
		require.Equal(t, 200, resp.StatusCode, "stream %d", i)
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
	resp := s.openEvents(ctx, id, s.token)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 429, resp.StatusCode, "%s", body)
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))

	secret, hash := tokens.New()
	_, err := s.store.CreateToken(context.Background(), catalog.Token{Name: "other-viewer", Project: s.project, Role: tokens.RoleViewer}, hash)
	require.NoError(t, err)
	resp = s.openEvents(ctx, id, secret)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)

	// Closing streams frees their slots.
	cancel()
	require.Eventually(t, func() bool { return s.metric(t, "atelier_streams_open") == 0 }, 10*time.Second, 50*time.Millisecond)
	resp = s.openEvents(context.Background(), id, s.token)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	s.cancel(id, "done")
}
