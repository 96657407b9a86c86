package kube

import (
	"context"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
)

// ProgressReporter tells a step's run why the step is not running yet.
type ProgressReporter func(ctx context.Context, p activities.StepProgress) error

// WithProgressReporter replaces how waiting reasons reach the run (default:
// activities.SignalRun). Tests use it to observe them.
func WithProgressReporter(f ProgressReporter) Option { return func(b *Backend) { b.progress = f } }

// waitingMessage renders a Progress's waiting reason ("" when none).
func waitingMessage(w *framework.Trouble) string {
	if w == nil {
		return ""
	}
	return w.Reason + ": " + w.Message
}

// reportWaiting sends msg if it differs from what was last sent. A lost
// report only costs the message: the step goes on either way.
func (r *stepRun) reportWaiting(ctx context.Context, msg string) {
	if msg == r.lastWaiting || r.b.progress == nil {
		return
	}
	r.lastWaiting = msg
	r.logger.Info("step waiting reason", zap.String("message", msg))
	err := r.b.progress(ctx, activities.StepProgress{Step: r.req.Step, Item: r.req.Item, Attempt: r.req.Attempt, Message: msg})
	if err != nil {
		r.logger.Warn("cannot report why the step waits", zap.String("message", msg), zap.Error(err))
	}
}
