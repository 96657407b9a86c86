package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// Service names of Atelier's processes in traces (service.name).
const (
	GatewayService = "atelier-gateway"
	WorkerService  = "atelier-worker"
)

// tracerName is the instrumentation scope of Atelier's own spans and of
// the Temporal interceptor's.
const tracerName = "github.com/atelier-ml/atelier"

// shutdownTimeout bounds the flush of the last spans when a process stops,
// so an unreachable collector cannot hold the stop up.
const shutdownTimeout = 5 * time.Second

// Tracing is one process's OpenTelemetry tracing, or nothing: the zero
// value (and a nil *Tracing) is off, and then nothing is installed
// anywhere, so an untraced process pays nothing for it.
type Tracing struct {
	provider *sdktrace.TracerProvider
}

// TracingEnabled tells whether the standard OpenTelemetry environment asks
// for traces: an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and neither OTEL_SDK_DISABLED=true
// nor OTEL_TRACES_EXPORTER=none turns it off.
func TracingEnabled() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") ||
		strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// NewTracing builds the tracer provider of the process named service.
// With exp nil it exports over OTLP/HTTP when TracingEnabled, configured
// by the standard OTEL_EXPORTER_OTLP_* variables (endpoint, headers, TLS,
// timeout), and is off otherwise. A non-nil exp (tests: an in-memory
// exporter) turns tracing on and receives each span as it ends, so what a
// test reads is complete without a flush.
//
// Sampling is the SDK's: parent-based, always on for root spans, unless
// OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG say otherwise. The
// resource is service.name plus OTEL_RESOURCE_ATTRIBUTES (and
// OTEL_SERVICE_NAME, which wins over service).
func NewTracing(ctx context.Context, service string, exp sdktrace.SpanExporter) (*Tracing, error) {
	var export sdktrace.TracerProviderOption
	switch {
	case exp != nil:
		export = sdktrace.WithSyncer(exp)
	case TracingEnabled():
		otlp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
		}
		export = sdktrace.WithBatcher(otlp)
	default:
		return &Tracing{}, nil
	}
	// Detectors later in the list win: the environment may rename the
	// service.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	return &Tracing{provider: sdktrace.NewTracerProvider(export, sdktrace.WithResource(res))}, nil
}

// Enabled tells whether spans are recorded.
func (t *Tracing) Enabled() bool { return t != nil && t.provider != nil }

// TracerProvider is the provider spans of this process come from; nil when
// tracing is off.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if !t.Enabled() {
		return nil
	}
	return t.provider
}

// TemporalInterceptors are the interceptors of the process's Temporal
// client: the SDK contrib's OpenTelemetry interceptor, which carries the
// span context in workflow and activity headers (StartWorkflow →
// RunWorkflow → StartActivity → RunActivity, child workflows likewise).
// It is also a worker interceptor, and the SDK installs a client's worker
// interceptors on every worker built on that client, so workers need
// nothing more. Queries are not traced. Its workflow side starts no span while a workflow replays:
// it adds no commands, so histories replay unchanged. Nil when off.
func (t *Tracing) TemporalInterceptors() ([]interceptor.ClientInterceptor, error) {
	if !t.Enabled() {
		return nil, nil
	}
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer: t.provider.Tracer(tracerName),
		// Event streams and status reads query live runs every poll
		// interval, most from the gateway's background hub: each would
		// be a root trace of its own, drowning the runs' traces.
		DisableQueryTracing: true,
	})
	if err != nil {
		return nil, fmt.Errorf("tracing: Temporal interceptor: %w", err)
	}
	return []interceptor.ClientInterceptor{i}, nil
}

// Shutdown exports the spans still buffered and stops the provider,
// waiting at most a few seconds for the collector.
func (t *Tracing) Shutdown() error {
	if !t.Enabled() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	return t.provider.Shutdown(ctx)
}
