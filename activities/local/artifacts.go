package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
	"github.com/atelier-ml/atelier/runstate"
)

// ArtifactStore moves a step's artifacts between the attempt's
// directories and the project's object store (artifactstore.Store).
type ArtifactStore interface {
	PutPath(ctx context.Context, project string, root *os.Root, name string) (artifactstore.Object, error)
	Get(ctx context.Context, project string, o artifactstore.Object, dest string) error
}

var _ ArtifactStore = (*artifactstore.Store)(nil)

// WithArtifacts lets steps read and write artifacts through s. Without it
// a step that declares some fails saying the worker has no store.
func WithArtifacts(s ArtifactStore) Option { return func(r *Runner) { r.artifacts = s } }

// ArtifactUsage says how many bytes a project's artifacts take (the
// catalogue).
type ArtifactUsage interface {
	ArtifactBytesUsed(ctx context.Context, project string) (int64, error)
}

// WithArtifactLimit caps every project's artifacts at limit bytes: a step
// whose outputs would take its project past it fails naming the limit.
// limit <= 0 means no cap.
func WithArtifactLimit(limit int64, usage ArtifactUsage) Option {
	return func(r *Runner) { r.artifactLimit, r.artifactUsage = limit, usage }
}

func (a *attempt) inputsDir() string    { return filepath.Join(a.attemptDir, "inputs") }
func (a *attempt) artifactsDir() string { return filepath.Join(a.attemptDir, "artifacts") }

func (a *attempt) hasArtifacts() bool { return len(a.req.Inputs) > 0 || len(a.req.Outputs) > 0 }

// placeInputs gives the step a fresh, empty $ATELIER_ARTIFACTS and its
// input artifacts under $ATELIER_INPUTS, downloaded by the worker (the
// step never holds the store's credentials). A restarted execution starts
// over from empty directories.
func (a *attempt) placeInputs(ctx context.Context) error {
	if !a.hasArtifacts() {
		return nil
	}
	if a.r.artifacts == nil {
		return invalid("the step declares artifacts but this worker has no artifact store (ATELIER_ARTIFACTS_URL)")
	}
	for _, dir := range []string{a.inputsDir(), a.artifactsDir()} {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("clear %s: %w", dir, err)
		}
	}
	// Inputs are the worker's, readable by the step; outputs the step's.
	if err := os.Mkdir(a.inputsDir(), 0o755); err != nil {
		return fmt.Errorf("create inputs dir: %w", err)
	}
	if err := os.Mkdir(a.artifactsDir(), 0o700); err != nil {
		return fmt.Errorf("create artifacts dir: %w", err)
	}
	if err := a.r.giveTo(a.artifactsDir()); err != nil {
		return err
	}
	if len(a.req.Inputs) == 0 {
		return nil
	}
	stop := a.heartbeatWhile(ctx, Heartbeat{})
	defer stop()
	start := time.Now()
	var bytes int64
	for _, in := range a.req.Inputs {
		if !filepath.IsLocal(in.Name) {
			return invalid("input artifact name %q cannot name a path under $ATELIER_INPUTS", in.Name)
		}
		o := artifactstore.Object{Digest: in.Digest, Size: in.Size, Files: in.Files}
		dest := filepath.Join(a.inputsDir(), filepath.FromSlash(in.Name)) // <input>/<item> from a forEach
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return fmt.Errorf("create inputs dir: %w", err)
		}
		if err := a.r.artifacts.Get(ctx, a.req.Project, o, dest); err != nil {
			if errors.Is(err, artifactstore.ErrNotFound) {
				return invalid("input artifact %q (%s from %s) is no longer in the artifact store", in.Name, in.Digest, in.From)
			}
			return fmt.Errorf("download input artifact %q: %w", in.Name, err)
		}
		bytes += in.Size
	}
	a.logger.Info("input artifacts placed", zap.Int("artifacts", len(a.req.Inputs)), zap.Int64("bytes", bytes),
		zap.Duration("took", time.Since(start)))
	return nil
}

// storeOutputs stores the output artifacts a succeeded step wrote and
// adds their references to result. A declared output that is missing, or
// that is or holds a link or a special file, fails the step (BadOutputs)
// naming it; a store that cannot be reached is retried by Temporal (the
// step runs again: nothing half-stored is ever visible).
func (a *attempt) storeOutputs(ctx context.Context, result *activities.ContainerResult) error {
	bad := func(format string, args ...any) error {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), activities.ErrTypeBadOutputs, nil, *result)
	}
	if len(a.req.Outputs) == 0 {
		return nil
	}
	root, err := os.OpenRoot(a.artifactsDir())
	if err != nil {
		return fmt.Errorf("open artifacts dir: %w", err)
	}
	defer root.Close()
	if err := a.checkArtifactLimit(ctx, root, bad); err != nil {
		return err
	}
	// The process's heartbeat, so that a worker lost while storing still
	// leaves what the next execution needs (its log offset, its group).
	stop := a.heartbeatWhile(ctx, a.processHeartbeat())
	defer stop()
	start := time.Now()
	var bytes int64
	for _, out := range a.req.Outputs {
		name := out.StoredPath()
		o, err := a.r.artifacts.PutPath(ctx, a.req.Project, root, name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return bad("the step did not write its output artifact %q ($ATELIER_ARTIFACTS/%s)", out.Name, name)
		case tree.Escapes(err):
			return bad("output artifact %q: %v", out.Name, err)
		case err != nil:
			return fmt.Errorf("store output artifact %q: %w", out.Name, err)
		}
		bytes += o.Size
		producer := runstate.ArtifactProducer{Run: a.req.RunID, Step: a.req.Step, Item: a.req.Item, Attempt: a.req.Attempt}
		result.Artifacts = append(result.Artifacts, runstate.StoredOutput(a.req.Project, producer, out, o.Digest, o.Size, o.Files))
	}
	a.logger.Info("output artifacts stored", zap.Int("artifacts", len(a.req.Outputs)), zap.Int64("bytes", bytes),
		zap.Duration("took", time.Since(start)))
	return nil
}

// checkArtifactLimit fails the step (through bad) when storing its
// outputs would take the project past the operator's limit. The check
// counts the outputs' full size (some bytes may already be stored: the
// limit errs on the side of refusing) and is not a reservation: steps
// storing at once may together exceed it by what they store.
func (a *attempt) checkArtifactLimit(ctx context.Context, root *os.Root, bad func(string, ...any) error) error {
	if a.r.artifactLimit <= 0 || a.r.artifactUsage == nil {
		return nil
	}
	var adding int64
	for _, out := range a.req.Outputs {
		adding += tree.Size(root, out.StoredPath())
	}
	used, err := a.r.artifactUsage.ArtifactBytesUsed(ctx, a.req.Project)
	if err != nil {
		return fmt.Errorf("read project %s's artifact usage: %w", a.req.Project, err)
	}
	if used+adding > a.r.artifactLimit {
		return bad("storing the step's output artifacts (%s) would take project %s's artifacts to %s, over the limit of %s per project set by the operator (ATELIER_ARTIFACTS_PROJECT_LIMIT); delete old runs or ask for more",
			artifactstore.HumanBytes(adding), a.req.Project, artifactstore.HumanBytes(used+adding), artifactstore.HumanBytes(a.r.artifactLimit))
	}
	return nil
}

// heartbeatWhile heartbeats hb every interval until the returned stop is
// called: transfers can outlast the heartbeat timeout.
func (a *attempt) heartbeatWhile(ctx context.Context, hb Heartbeat) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(a.r.heartbeat)
		defer t.Stop()
		for {
			activity.RecordHeartbeat(ctx, hb)
			select {
			case <-t.C:
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); <-finished }
}
