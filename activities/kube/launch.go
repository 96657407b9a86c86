package kube

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.temporal.io/sdk/temporal"
	"gocloud.dev/blob"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/internal/platform/launch"
	"github.com/atelier-ml/atelier/internal/platform/launch/grant"
	"github.com/atelier-ml/atelier/runstate"
)

// Launcher is how this cluster's container steps with artifacts reach
// them, and how those that declare metrics hand them back (package
// launch): the image holding the launcher, the gateway's URL as pods
// reach it, and the key that seals their grants (the installation's
// secrets key, which the gateway opens them with).
type Launcher struct {
	Image   string
	Gateway string
	Box     grant.Box
}

// ArtifactReader reads stored objects (artifactstore.Store): the worker
// reads a launched step's metrics file there.
type ArtifactReader interface {
	Reader(ctx context.Context, project, digest string) (*blob.Reader, error)
}

// WithArtifactReader lets the worker read what launchers stored (a
// step's metrics). Without it a launched step's metrics fail it, saying
// the worker has no artifact store.
func WithArtifactReader(r ArtifactReader) Option { return func(b *Backend) { b.artifacts = r } }

// WithLauncher lets container steps read and write artifacts, and report
// declared metrics, on this cluster through the launcher. Without it such
// a step fails saying what the worker lacks.
func WithLauncher(l Launcher) Option { return func(b *Backend) { b.launcher = l } }

// grantTTL bounds a grant of a step without a timeout; with one, the
// grant lasts the timeout and an hour. A grant also dies with its run.
const grantTTL = 30 * 24 * time.Hour

// launches reports whether the attempt runs under the launcher: a
// container with artifacts, or one that declared metrics (the launcher
// stores its $ATELIER_METRICS file, which need not fit the termination
// message, for the worker to read).
func launches(req activities.KubeStepRequest) bool {
	return req.Kind == activities.KubeJob && (hasArtifacts(req) || req.Metrics)
}

func hasArtifacts(req activities.KubeStepRequest) bool {
	return len(req.Inputs) > 0 || len(req.Outputs) > 0
}

// launch is the attempt's launcher and its sealed grant, or nil when the
// attempt has neither artifacts nor declared metrics. A worker without a
// launcher fails the step for good, naming what it lacks; so does one
// without an artifact store when the step declared metrics (it could not
// read them back).
func (b *Backend) launch(ctx context.Context, req activities.KubeStepRequest) (*framework.Launch, string, error) {
	if !launches(req) {
		return nil, "", nil
	}
	l := b.launcher
	missing := framework.LauncherMissing(l.Image, l.Gateway, l.Box != nil)
	if len(missing) > 0 && hasArtifacts(req) {
		return nil, "", framework.Invalid("the step has artifacts but the worker of cluster %s cannot hand them to a pod: it lacks %v", b.cluster, missing)
	}
	if req.Metrics && b.artifacts == nil {
		missing = append(missing, "an artifact store to read them from (ATELIER_ARTIFACTS_URL)")
	}
	if len(missing) > 0 {
		return nil, "", framework.Invalid("the step declares metrics but the worker of cluster %s cannot collect them from its pod (the launcher stores $ATELIER_METRICS): it lacks %v", b.cluster, missing)
	}
	g := grant.Grant{Project: req.Project, Run: req.RunID, Step: req.Step, Item: req.Item, Attempt: req.Attempt,
		Expires: b.clock.Now().Add(grantTTL)}
	if req.Timeout > 0 {
		g.Expires = b.clock.Now().Add(req.Timeout + time.Hour)
	}
	spec := launch.Spec{Gateway: l.Gateway, ResultPath: framework.OutputsPath}
	for _, in := range req.Inputs {
		g.Inputs = append(g.Inputs, grant.GrantInput{Digest: in.Digest, Files: in.Files})
		spec.Inputs = append(spec.Inputs, launch.Input{Name: in.Name, Digest: in.Digest, Size: in.Size, Files: in.Files})
	}
	for _, out := range req.Outputs {
		spec.Outputs = append(spec.Outputs, launch.Output{Name: out.Name, Path: out.StoredPath()})
	}
	token, err := grant.Seal(ctx, l.Box, g)
	if err != nil {
		return nil, "", fmt.Errorf("seal the step's grant: %w", err)
	}
	return &framework.Launch{Image: l.Image, Spec: spec}, token, nil
}

// launchedOutputs reads a launched attempt's Result from its termination
// message: its outputs and the artifacts it stored. A Result that says
// the launcher failed is the step's failure: for good when the step wrote
// bad outputs, retried when the store could not be reached.
func (r *stepRun) launchedOutputs(ctx context.Context, msg, pod string, res activities.KubeStepResult) (activities.KubeStepResult, error) {
	lr, err := launch.ParseResult(msg)
	if err != nil {
		return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s (pod %s)", err, pod), activities.ErrTypeBadOutputs, nil, res)
	}
	if lr.Error != "" {
		return res, r.launcherFailure(lr, res)
	}
	if len(lr.Outputs) > 0 {
		outputs, err := framework.ParseOutputs(string(lr.Outputs))
		if err != nil {
			return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s (pod %s)", err, pod), activities.ErrTypeBadOutputs, nil, res)
		}
		res.Outputs = outputs
	}
	stored := map[string]launch.Stored{}
	for _, a := range lr.Artifacts {
		stored[a.Name] = a
	}
	for _, out := range r.req.Outputs {
		a, ok := stored[out.Name]
		if !ok {
			return res, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("the launcher did not report the output artifact %q (pod %s)", out.Name, pod), activities.ErrTypeBadOutputs, nil, res)
		}
		producer := runstate.ArtifactProducer{Run: r.req.RunID, Step: r.req.Step, Item: r.req.Item, Attempt: r.req.Attempt}
		res.Artifacts = append(res.Artifacts, runstate.StoredOutput(r.req.Project, producer, out, a.Digest, a.Size, a.Files))
	}
	if lr.Metrics != nil {
		m, err := r.readMetrics(ctx, lr.Metrics.Digest)
		if err != nil {
			return res, err
		}
		res.Metrics = r.redactor().Metrics(m)
	}
	return res, nil
}

// readMetrics reads and checks the metrics file a launcher stored. A
// store that cannot be reached is retried; a bad file fails the step for
// good, every problem named (redacted: names may hold a secret).
func (r *stepRun) readMetrics(ctx context.Context, digest string) (*runstate.Metrics, error) {
	if r.b.artifacts == nil {
		return nil, framework.Invalid("the step wrote metrics but the worker of cluster %s has no artifact store to read them from (ATELIER_ARTIFACTS_URL)", r.b.cluster)
	}
	rd, err := r.b.artifacts.Reader(ctx, r.req.Project, digest)
	if err != nil {
		return nil, fmt.Errorf("read the step's metrics: %w", err)
	}
	defer rd.Close()
	b, err := io.ReadAll(io.LimitReader(rd, runstate.MaxMetricsBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read the step's metrics: %w", err)
	}
	m, err := runstate.ParseMetrics(b)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(r.redactor().String(err.Error()), activities.ErrTypeBadOutputs, nil)
	}
	return m, nil
}

// launcherFailure is the error of a Result whose launcher failed.
func (r *stepRun) launcherFailure(lr launch.Result, res activities.KubeStepResult) error {
	if lr.Kind == launch.ErrOutputs || lr.Kind == launch.ErrSetup || lr.Kind == launch.ErrLimit {
		return temporal.NewNonRetryableApplicationError(lr.Error, activities.ErrTypeBadOutputs, nil, res)
	}
	if !hasArtifacts(r.req) {
		return framework.StepFailed("storing the step's metrics failed: "+lr.Error, res)
	}
	return framework.StepFailed("moving the step's artifacts failed: "+lr.Error, res)
}
