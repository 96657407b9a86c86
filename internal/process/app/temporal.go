package app

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/process/config"
)

// NewTemporalClient dials the configured Temporal frontend and namespace.
// The SDK's metrics, and those workflow code emits, go to m's registry.
// With tracing on, the client (and every worker built on it) carries the
// trace through workflow and activity headers.
func NewTemporalClient(ctx context.Context, cfg config.Config, l *zap.Logger, m *telemetry.Metrics, tr *telemetry.Tracing) (client.Client, func(), error) {
	interceptors, err := tr.TemporalInterceptors()
	if err != nil {
		return nil, nil, err
	}
	c, err := client.DialContext(ctx, client.Options{
		HostPort:       cfg.TemporalHostPort,
		Namespace:      cfg.Namespace,
		Logger:         NewTemporalLogger(l),
		MetricsHandler: m.SDK,
		Interceptors:   interceptors,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("connect to Temporal at %s (namespace %s): %w", cfg.TemporalHostPort, cfg.Namespace, err)
	}
	return c, c.Close, nil
}
