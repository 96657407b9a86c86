package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore/staging"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// The variables that name a staged attempt's inputs and outputs to its
// job (URIs, as the job's pods see the staging store).
const (
	InputsURIEnv    = "ATELIER_INPUTS_URI"
	ArtifactsURIEnv = "ATELIER_ARTIFACTS_URI"
)

// StagingArtifacts is the artifact store as staging uses it
// (artifactstore.Store): it reads inputs and stores outputs.
type StagingArtifacts interface {
	staging.Source
	Objects(project string) tree.Objects
}

// WithStaging lets ray steps read and write artifacts on this cluster
// through the staging store st (package staging), which their pods reach
// with their own identity, copying between it and the artifact store
// arts. The backend also sweeps what crashed workers left in st (older
// than StagingSweepAge), hourly. Without it a ray step that declares
// artifacts fails saying what the worker lacks.
func WithStaging(st *staging.Store, arts StagingArtifacts) Option {
	return func(b *Backend) { b.staging, b.stagingArts = st, arts }
}

// StagingSweepAge is how old what an attempt staged must be before the
// sweep removes it: a day over the longest step timeout (a ray step
// without a timeout that runs longer could lose its inputs; its outputs
// are read when it ends).
const StagingSweepAge = pipeline.MaxStepTimeout + 24*time.Hour

// stagingSweepEvery is how often the backend sweeps the staging store.
const stagingSweepEvery = time.Hour

// stages reports whether the attempt's artifacts go through the staging
// store: a ray or spark job's (their pods take no files from a launcher).
func stages(req activities.KubeStepRequest) bool {
	return (req.Kind == activities.KubeRayJob || req.Kind == activities.KubeSparkApp) && hasArtifacts(req)
}

// stage copies the attempt's inputs to its part of the staging store and
// returns that part and the job's variables naming it; nil when the
// attempt stages nothing. A worker without a staging store fails the step
// for good, naming what it lacks.
func (b *Backend) stage(ctx context.Context, req activities.KubeStepRequest) (*staging.Attempt, []corev1.EnvVar, error) {
	if !stages(req) {
		return nil, nil, nil
	}
	if b.staging == nil || b.stagingArts == nil {
		return nil, nil, framework.Invalid("the step has artifacts but the worker of cluster %s has no staging store to hand them to a Ray or Spark job: it lacks ATELIER_ARTIFACTS_STAGING_URL and ATELIER_ARTIFACTS_STAGING_URI (and an artifact store, ATELIER_ARTIFACTS_URL)", b.cluster)
	}
	a, err := b.staging.Attempt(req.Project, req.RunID, req.Step, req.Item, req.Attempt)
	if err != nil {
		return nil, nil, framework.Invalid("%v", err)
	}
	if len(req.Inputs) > 0 {
		// Keep what an earlier execution heartbeated (the object to
		// adopt): a copy can outlast the heartbeat timeout.
		prev, _ := previousHeartbeat(ctx, zap.NewNop())
		hb := b.startHeartbeat(ctx, prev)
		err := a.Stage(ctx, b.stagingArts, req.Project, req.Inputs)
		hb.Stop()
		if err != nil {
			if errors.Is(err, tree.ErrNotFound) {
				return nil, nil, framework.Invalid("staging the step's inputs: %v", err)
			}
			return nil, nil, fmt.Errorf("staging the step's inputs: %w", err) // retried
		}
	}
	env := []corev1.EnvVar{{Name: InputsURIEnv, Value: a.InputsURI()}, {Name: ArtifactsURIEnv, Value: a.OutputsURI()}}
	return &a, env, nil
}

// withStagingEnv is the step's variables with the staging URIs, sorted by
// name as the rest.
func withStagingEnv(env, staged []corev1.EnvVar) []corev1.EnvVar {
	out := append(slices.Clone(env), staged...)
	slices.SortStableFunc(out, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// finishStaged stores a staged attempt's outputs once its job succeeded
// (res, err are the attempt's outcome), then removes its part of the
// staging store once the outcome is final: not when this execution leaves
// the job running, or fails in a way its retry may get past (the retry
// needs the inputs, or reads the outputs again).
func (r *stepRun) finishStaged(ctx context.Context, a *staging.Attempt, res activities.KubeStepResult, err error) (activities.KubeStepResult, error) {
	if err == nil {
		res, err = r.ingest(ctx, a, res)
	}
	var app *temporal.ApplicationError
	// A context that ended otherwise than by a cancel of the step (a
	// timeout, a superseded execution, a stopping worker) is not final:
	// the retry adopts the job and reads its outputs again.
	final := err == nil || errors.As(err, &app) && app.NonRetryable() || cancelRequested(ctx)
	if final && !r.leftRunning {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if rerr := a.Remove(rctx); rerr != nil {
			r.logger.Warn("cannot remove the attempt's staged artifacts; the staging sweep will", zap.Error(rerr))
		}
	}
	return res, err
}

// ingest stores the outputs the job wrote under its outputs URI.
func (r *stepRun) ingest(ctx context.Context, a *staging.Attempt, res activities.KubeStepResult) (activities.KubeStepResult, error) {
	if len(r.req.Outputs) == 0 {
		return res, nil
	}
	hb := r.b.startHeartbeat(ctx, Heartbeat{Namespace: r.ns, Name: r.name, UID: string(r.uid)})
	objs, err := a.Ingest(ctx, r.b.stagingArts.Objects(r.req.Project), r.req.Outputs)
	hb.Stop()
	var missing *staging.MissingError
	var amb *staging.AmbiguousError
	switch {
	case errors.As(err, &missing) || errors.As(err, &amb):
		return res, temporal.NewNonRetryableApplicationError(err.Error(), activities.ErrTypeBadOutputs, nil, res)
	case err != nil:
		// Retried: the job stays finished and its outputs staged.
		return res, fmt.Errorf("storing the job's output artifacts: %w", err)
	}
	producer := runstate.ArtifactProducer{Run: r.req.RunID, Step: r.req.Step, Item: r.req.Item, Attempt: r.req.Attempt}
	for i, out := range r.req.Outputs {
		o := objs[i]
		res.Artifacts = append(res.Artifacts, runstate.StoredOutput(r.req.Project, producer, out, o.Digest, o.Size, o.Files))
	}
	r.logger.Info("stored the job's output artifacts", zap.Int("artifacts", len(res.Artifacts)))
	return res, nil
}

// sweepStaging removes, hourly until ctx ends, what attempts left in the
// staging store (package staging, Sweep).
func (b *Backend) sweepStaging(ctx context.Context) {
	t := time.NewTicker(stagingSweepEvery)
	defer t.Stop()
	for {
		if n, err := b.staging.Sweep(ctx, StagingSweepAge); err != nil && ctx.Err() == nil {
			b.logger.Warn("sweeping the staging store failed", zap.Error(err))
		} else if n > 0 {
			b.logger.Info("swept objects older than the longest step from the staging store", zap.Int("objects", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
