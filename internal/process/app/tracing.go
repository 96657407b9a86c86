package app

import (
	"context"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/internal/platform/telemetry"
)

// NewTracing builds the tracing of the process named service (off unless
// the OpenTelemetry environment or m's test exporter asks for it). The
// cleanup flushes the last spans; wire runs it after the Temporal client
// closed, so the client's last spans are in it.
func NewTracing(ctx context.Context, service string, m *telemetry.Metrics, l *zap.Logger) (*telemetry.Tracing, func(), error) {
	tr, err := telemetry.NewTracing(ctx, service, m.SpanExporter)
	if err != nil {
		return nil, nil, err
	}
	if !tr.Enabled() {
		return tr, func() {}, nil
	}
	l.Info("tracing on", zap.String("service", service))
	return tr, func() {
		if err := tr.Shutdown(); err != nil {
			l.Warn("tracing: last spans not exported", zap.Error(err))
		}
	}, nil
}
