package mirror

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/runstate"
)

// ErrTypeInvalidRunStatus marks a status that can never be stored, so
// retrying it would only loop; it indicates a workflow bug.
const ErrTypeInvalidRunStatus = "InvalidRunStatus"

// RunMirror stores the latest status of a run. The Postgres store implements
// it; the interface lives with its consumer. Implementations must ignore a
// status whose Seq is not newer than the stored one, which is what makes
// retried and out-of-order mirror activities harmless.
type RunMirror interface {
	MirrorRun(ctx context.Context, s runstate.Status) error
}

// Mirror is the activity that copies a run's status into the catalogue so
// runs can be listed and read after their workflow history is gone.
type Mirror struct {
	store  RunMirror
	logger *zap.Logger
}

// New returns a Mirror writing to store. A nil logger logs nothing.
func New(store RunMirror, logger *zap.Logger) *Mirror {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Mirror{store: store, logger: logger}
}

// Register registers MirrorRun under its contract name, which workflow
// histories refer to.
func (m *Mirror) Register(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(m.MirrorRun, activity.RegisterOptions{Name: activities.MirrorRunName})
}

// MirrorRun writes s to the catalogue. Store errors are returned as plain
// errors so Temporal retries them: a database blip must not lose the
// status, and the Seq check makes a late retry harmless.
func (m *Mirror) MirrorRun(ctx context.Context, s runstate.Status) error {
	if s.RunID == "" || s.Project == "" {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("run status has no run id or project (runId=%q, project=%q)", s.RunID, s.Project),
			ErrTypeInvalidRunStatus, nil)
	}
	if err := m.store.MirrorRun(ctx, s); err != nil {
		attempt := int32(0)
		if activity.IsActivity(ctx) {
			attempt = activity.GetInfo(ctx).Attempt
		}
		m.logger.Warn("cannot mirror run status; Temporal will retry",
			zap.String("run", s.RunID), zap.Int64("seq", s.Seq), zap.Int32("attempt", attempt), zap.Error(err))
		return fmt.Errorf("mirror run %s (seq %d): %w", s.RunID, s.Seq, err)
	}
	m.logger.Debug("mirrored run status", zap.String("run", s.RunID), zap.Int64("seq", s.Seq),
		zap.String("state", string(s.State)))
	return nil
}
