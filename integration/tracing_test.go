package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/runstate"
)

// A declarative run started through REST is one trace: the gateway's
// request span, the client's StartWorkflow, the worker's RunWorkflow, and
// the workflow's StartActivity and the worker's RunActivity of its step,
// each the parent of the next, carried by Temporal's headers between the
// processes. No span carries the caller's token.
func TestTracingFollowsARunOnRealStack(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	s := newStack(t, stackOptions{spanExporter: exp})
	s.createPipeline("traced", `
steps:
  - name: hello
    container: {command: ["sh", "-c", "echo hello"]}
`)
	id := s.start("traced", nil)
	require.Equal(t, gen.RunStateSUCCEEDED, s.waitTerminal(id, time.Minute).State)

	// The run's row says SUCCEEDED once the mirror activity ran; the
	// RunWorkflow span ends when the workflow's last task completes.
	runWorkflow := "RunWorkflow:" + runstate.PipelineWorkflowName
	var spans tracetest.SpanStubs
	require.Eventually(t, func() bool {
		spans = exp.GetSpans()
		return find(spans, func(s tracetest.SpanStub) bool { return s.Name == runWorkflow }) != nil
	}, 30*time.Second, 50*time.Millisecond, "no %s span", runWorkflow)

	t.Logf("spans: %v", names(spans))
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, sp := range spans {
		byID[sp.SpanContext.SpanID()] = sp
		for _, a := range sp.Attributes {
			require.NotContains(t, strings.ToLower(string(a.Key)), "authorization", "span %s", sp.Name)
			require.NotContains(t, a.Value.Emit(), s.token, "span %s attribute %s", sp.Name, a.Key)
		}
	}
	// The leaf: a RunActivity of the step's container activity, whose
	// ancestors must be, nearest first, these.
	chain := []string{"StartActivity:", runWorkflow, "StartWorkflow:" + runstate.PipelineWorkflowName, "POST /v1/projects/:project/runs"}
	var leaf *tracetest.SpanStub
	for _, sp := range spans {
		if !strings.HasPrefix(sp.Name, "RunActivity:") {
			continue
		}
		if p, ok := byID[sp.Parent.SpanID()]; ok && p.Parent.SpanID() != (trace.SpanID{}) {
			if gp, ok := byID[p.Parent.SpanID()]; ok && gp.Name == runWorkflow {
				leaf = &sp
				break
			}
		}
	}
	require.NotNil(t, leaf, "no RunActivity span under %s; spans: %v", runWorkflow, names(spans))
	traceID := leaf.SpanContext.TraceID()
	cur := *leaf
	for _, want := range chain {
		p, ok := byID[cur.Parent.SpanID()]
		require.True(t, ok, "the parent of %s was not exported; spans: %v", cur.Name, names(spans))
		require.True(t, strings.HasPrefix(p.Name, want), "parent of %s is %s, want %s", cur.Name, p.Name, want)
		require.Equal(t, traceID, p.SpanContext.TraceID(), "%s is in another trace", p.Name)
		cur = p
	}
	require.False(t, cur.Parent.IsValid(), "the request span is the root (the test sent no traceparent)")
	require.Equal(t, trace.SpanKindServer, cur.SpanKind)
	require.Equal(t, telemetry.GatewayService, serviceName(cur))
	require.Equal(t, telemetry.WorkerService, serviceName(*leaf))
	attrs := map[string]string{}
	for _, a := range cur.Attributes {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	require.Equal(t, map[string]string{"http.request.method": "POST", "http.route": "/v1/projects/:project/runs", "http.response.status_code": "201"}, attrs)
}

func find(spans tracetest.SpanStubs, f func(tracetest.SpanStub) bool) *tracetest.SpanStub {
	for i := range spans {
		if f(spans[i]) {
			return &spans[i]
		}
	}
	return nil
}

func names(spans tracetest.SpanStubs) []string {
	var ns []string
	for _, s := range spans {
		ns = append(ns, s.Name)
	}
	return ns
}

func serviceName(s tracetest.SpanStub) string {
	for _, a := range s.Resource.Attributes() {
		if a.Key == "service.name" {
			return a.Value.Emit()
		}
	}
	return ""
}
