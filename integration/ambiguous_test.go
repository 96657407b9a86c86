package integration

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/atelier-ml/atelier/api"
	"github.com/atelier-ml/atelier/internal/temporaltest"
	"github.com/atelier-ml/atelier/workflows"
	"github.com/atelier-ml/atelier/workflows/runclient"
)

// Seen by a user: an ambiguous start error (an RPC timeout after Temporal
// had accepted the start) deleted the run's row and answered "nothing was
// created", and a retry with the same Idempotency-Key started a second
// run. Here a gRPC interceptor lets the first start reach the real server
// and then drops its reply, as a timed-out connection would.
func TestAmbiguousStartKeepsIdempotency(t *testing.T) {
	s := newStack(t)
	s.createPipeline("tiny", "steps:\n  - name: hello\n    container: {command: [echo, hi]}\n")

	var dropped atomic.Bool
	dropOnce := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && strings.HasSuffix(method, "/StartWorkflowExecution") && dropped.CompareAndSwap(false, true) {
			return status.Error(codes.DeadlineExceeded, "context deadline exceeded (reply dropped by the test)")
		}
		return err
	}
	opts := temporaltest.Server(t).ClientOptions()
	opts.ConnectionOptions.DialOptions = append(opts.ConnectionOptions.DialOptions, grpc.WithChainUnaryInterceptor(dropOnce))
	c, err := client.Dial(opts)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	h, err := api.New(s.store, runclient.New(c, runclient.Config{Namespace: s.cfg.Namespace}), api.WithTaskQueue(s.cfg.TaskQueue))
	require.NoError(t, err)
	gw := httptest.NewServer(h)
	t.Cleanup(gw.Close)
	flaky := *s
	flaky.url = gw.URL

	body := map[string]any{"pipeline": "tiny"}
	key := []string{"Idempotency-Key", "retry-me"}
	var prob struct {
		Detail string `json:"detail"`
	}
	require.Equal(t, 503, flaky.do("POST", s.path("/runs"), body, &prob, key...))
	require.True(t, dropped.Load())
	assert.Contains(t, prob.Detail, "Idempotency-Key")

	var again runView
	require.Equal(t, 200, flaky.do("POST", s.path("/runs"), body, &again, key...))
	assert.Contains(t, prob.Detail, again.ID, "the retry names the same run")
	assert.Equal(t, workflows.RunSucceeded, s.waitTerminal(again.ID, 30*time.Second).State)

	// Exactly one workflow of that run exists, and one row.
	resp, err := s.temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: "WorkflowId = '" + again.ID + "'"})
	require.NoError(t, err)
	assert.Len(t, resp.Executions, 1)
	var page struct {
		Runs []runView `json:"runs"`
	}
	require.Equal(t, 200, s.do("GET", s.path("/runs?pipeline=tiny"), nil, &page))
	assert.Len(t, page.Runs, 1)
}
