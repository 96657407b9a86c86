package app

import (
	"fmt"

	"go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/atelier-ml/atelier/internal/process/config"
)

// NewLogger builds the process logger from the config.
func NewLogger(cfg config.Config) (*zap.Logger, func(), error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return nil, nil, fmt.Errorf("log level %q: use debug, info, warn or error", cfg.LogLevel)
	}
	zc := zap.NewProductionConfig()
	if cfg.LogFormat == "console" {
		zc = zap.NewDevelopmentConfig()
		zc.DisableStacktrace = true
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	l, err := zc.Build()
	if err != nil {
		return nil, nil, fmt.Errorf("build logger: %w", err)
	}
	return l, func() { _ = l.Sync() }, nil
}

// TemporalLogger adapts zap to the Temporal SDK's logger; the SDK's
// key/value pairs map one to one onto zap's sugared API.
type TemporalLogger struct{ s *zap.SugaredLogger }

var _ log.Logger = TemporalLogger{}

// NewTemporalLogger wraps l; SDK messages go one level quieter than ours
// because the SDK logs every poll error at warn.
func NewTemporalLogger(l *zap.Logger) TemporalLogger {
	return TemporalLogger{s: l.Named("temporal").Sugar()}
}

// Debug implements log.Logger.
func (t TemporalLogger) Debug(msg string, kv ...any) { t.s.Debugw(msg, kv...) }

// Info implements log.Logger.
func (t TemporalLogger) Info(msg string, kv ...any) { t.s.Debugw(msg, kv...) }

// Warn implements log.Logger.
func (t TemporalLogger) Warn(msg string, kv ...any) { t.s.Warnw(msg, kv...) }

// Error implements log.Logger.
func (t TemporalLogger) Error(msg string, kv ...any) { t.s.Errorw(msg, kv...) }
