package telemetry_test

import (
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/atelier-ml/atelier/internal/platform/telemetry"
)

// Tracing follows the standard environment: on with an OTLP endpoint,
// off without one or when the SDK or the traces exporter is switched
// off; off installs nothing.
func TestTracingFollowsTheEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		on   bool
	}{
		{"no endpoint", nil, false},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{"sdk disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
				t.Setenv(k, tc.env[k])
			}
			tr, err := telemetry.NewTracing(t.Context(), telemetry.GatewayService, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tr.Shutdown() })
			is, err := tr.TemporalInterceptors()
			if err != nil {
				t.Fatal(err)
			}
			if tr.Enabled() != tc.on || (tr.TracerProvider() != nil) != tc.on || (len(is) > 0) != tc.on {
				t.Errorf("enabled %v, provider %v, interceptors %d; want on=%v", tr.Enabled(), tr.TracerProvider(), len(is), tc.on)
			}
		})
	}
}

// A process's spans carry its service name unless OTEL_SERVICE_NAME
// renames it.
func TestTracingServiceName(t *testing.T) {
	for _, tc := range []struct{ env, want string }{{"", telemetry.WorkerService}, {"renamed", "renamed"}} {
		t.Setenv("OTEL_SERVICE_NAME", tc.env)
		exp := tracetest.NewInMemoryExporter()
		tr, err := telemetry.NewTracing(t.Context(), telemetry.WorkerService, exp)
		if err != nil {
			t.Fatal(err)
		}
		_, span := tr.TracerProvider().Tracer("test").Start(t.Context(), "x")
		span.End()
		spans := exp.GetSpans()
		if len(spans) != 1 {
			t.Fatalf("%d spans exported, want 1 (an injected exporter gets each span as it ends)", len(spans))
		}
		got := ""
		for _, a := range spans[0].Resource.Attributes() {
			if a.Key == "service.name" {
				got = a.Value.Emit()
			}
		}
		if got != tc.want {
			t.Errorf("OTEL_SERVICE_NAME=%q: service.name %q, want %q", tc.env, got, tc.want)
		}
		if err := tr.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
}
