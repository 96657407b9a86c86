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
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/internal/stack/temporaltest"
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

	body := gen.CreateRunRequest{Pipeline: ptrTo("tiny")}
	key := &gen.CreateRunParams{IdempotencyKey: ptrTo("retry-me")}
	first, err := flaky.client().CreateRunWithResponse(context.Background(), s.project, key, body)
	require.NoError(t, err)
	require.Equal(t, 503, first.StatusCode(), "%s", first.Body)
	require.True(t, dropped.Load())
	require.NotNil(t, first.ApplicationproblemJSON503)
	detail := val(first.ApplicationproblemJSON503.Detail)
	assert.Contains(t, detail, "Idempotency-Key")

	again, err := flaky.client().CreateRunWithResponse(context.Background(), s.project, key, body)
	require.NoError(t, err)
	require.Equal(t, 200, again.StatusCode(), "%s", again.Body)
	id := again.JSON200.Id
	assert.Contains(t, detail, id, "the retry names the same run")
	assert.Equal(t, gen.RunStateSUCCEEDED, s.waitTerminal(id, 30*time.Second).State)

	// Exactly one workflow of that run exists, and one row.
	resp, err := s.temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: "WorkflowId = '" + id + "'"})
	require.NoError(t, err)
	assert.Len(t, resp.Executions, 1)
	assert.Len(t, s.listRuns(gen.ListRunsParams{Pipeline: ptrTo("tiny")}), 1)
}
