package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/client/endpointclient"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/schema"
)

// Endpoints is what an attempt needs of endpoint workflows; errors are
// endpointclient's (ErrNotFound, ErrExists, *RejectedError).
type Endpoints interface {
	Create(ctx context.Context, project, name, workflowQueue, activityQueue string, spec inference.EndpointSpec) error
	Status(ctx context.Context, project, name string) (activities.EndpointStatus, error)
	UpdateSpec(ctx context.Context, project, name string, spec inference.EndpointSpec) (inference.Revision, error)
}

var _ Endpoints = (*endpointclient.Client)(nil)

// Clusters is the cluster registry: a new endpoint goes only to a
// registered cluster, since nobody would run its activities elsewhere.
type Clusters interface {
	GetCluster(ctx context.Context, name string) (catalog.Cluster, error)
}

// ProgressReporter tells a step's run where its rollout is.
type ProgressReporter func(ctx context.Context, p activities.StepProgress) error

// DefaultPollInterval is how often an attempt reads its endpoint's status:
// the endpoint's own tick (endpoint.DefaultTick).
const DefaultPollInterval = 2 * time.Second

// statusTimeout bounds one status query, well inside the step activity's
// heartbeat timeout (10 s): a query that hangs (the endpoint's worker
// busy or gone) is one missed poll, not a timed-out attempt.
const statusTimeout = 5 * time.Second

// Activities runs inference steps. Build it with New.
type Activities struct {
	endpoints Endpoints
	clusters  Clusters
	taskQueue string
	poll      time.Duration
	now       func() time.Time
	progress  ProgressReporter
	models    ModelRegistry
}

// Option adjusts Activities.
type Option func(*Activities)

// WithPollInterval replaces DefaultPollInterval (tests).
func WithPollInterval(d time.Duration) Option { return func(a *Activities) { a.poll = d } }

// WithClock replaces time.Now (tests).
func WithClock(now func() time.Time) Option { return func(a *Activities) { a.now = now } }

// WithProgressReporter replaces how stages reach the run (default:
// activities.SignalRun). Tests use it to observe them.
func WithProgressReporter(f ProgressReporter) Option { return func(a *Activities) { a.progress = f } }

// WithModels resolves a spec's model.ref in r, the project's model
// registry. Without it a spec naming a registered model fails the step.
func WithModels(r ModelRegistry) Option { return func(a *Activities) { a.models = r } }

// ModelRegistry resolves an endpoint spec's model.ref and records the
// endpoint's reference to the version before the spec is submitted
// (internal/store).
type ModelRegistry interface {
	catalog.ModelReader
	catalog.ModelReferrer
}

// New builds the activities of a local worker. taskQueue is its queue:
// endpoint workflows it creates run there, and so do the activities of an
// endpoint created without a cluster (the local runtime). clusters may be
// nil (no registry check).
func New(endpoints Endpoints, clusters Clusters, taskQueue string, opts ...Option) *Activities {
	a := &Activities{endpoints: endpoints, clusters: clusters, taskQueue: taskQueue,
		poll: DefaultPollInterval, now: time.Now, progress: activities.SignalRun}
	for _, o := range opts {
		o(a)
	}
	return a
}

// Register registers Deploy under activities.DeployEndpointName.
func (a *Activities) Register(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(a.Deploy, activity.RegisterOptions{Name: activities.DeployEndpointName})
}

// Deploy runs one attempt of an inference step: it creates or updates the
// endpoint, then waits for the revision that results (see the package
// documentation for outcomes, retries and cancellation).
func (a *Activities) Deploy(ctx context.Context, req activities.DeployEndpointRequest) (activities.DeployEndpointResult, error) {
	if err := checkRequest(req); err != nil {
		return activities.DeployEndpointResult{}, err
	}
	hb := activities.DeployProgress{StartedAt: a.now()}
	var prev activities.DeployProgress
	if activity.HasHeartbeatDetails(ctx) && activity.GetHeartbeatDetails(ctx, &prev) == nil && prev.Revision > 0 {
		hb = prev // a retried execution: the revision is made
	} else {
		rev, created, err := a.ensure(ctx, req)
		if err != nil {
			return activities.DeployEndpointResult{}, err
		}
		hb.Revision, hb.Created = rev, created
		activity.RecordHeartbeat(ctx, hb)
	}
	return a.wait(ctx, req, hb)
}

// checkRequest refuses what no retry can fix before anything is sent: a
// bad name, or a spec with problems (all of them, under "spec.", as the
// pipeline spec names them).
func checkRequest(req activities.DeployEndpointRequest) error {
	if err := inference.CheckName(req.Endpoint); err != nil {
		return temporal.NewNonRetryableApplicationError("endpoint: "+err.Error(), activities.ErrTypeInvalidStep, nil)
	}
	var ve *schema.ValidationError
	if err := inference.Validate(req.Spec); errors.As(err, &ve) {
		return invalidSpec(ve.Problems)
	}
	return nil
}

func invalidSpec(problems []schema.Problem) error {
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = "spec." + p.Path + ": " + p.Message
	}
	return temporal.NewNonRetryableApplicationError("invalid endpoint spec: "+strings.Join(msgs, "; "),
		activities.ErrTypeInvalidStep, nil, problems)
}

// ensure creates the endpoint, or updates it when it exists, and answers
// the revision to wait for and whether it created the endpoint. Errors
// that a retry may fix (Temporal unreachable) are returned as they are.
func (a *Activities) ensure(ctx context.Context, req activities.DeployEndpointRequest) (int, bool, error) {
	if err := a.resolveModel(ctx, &req); err != nil {
		return 0, false, err
	}
	st, err := a.endpoints.Status(ctx, req.Project, req.Endpoint)
	switch {
	case err == nil && st.TaskQueue != "" && !activities.IsClusterTaskQueue(st.TaskQueue):
		// An endpoint created on the local runtime (over REST, without a
		// cluster) stays there whatever the step's placement says.
		if ps := inference.CheckLocal(req.Spec); len(ps) > 0 {
			return 0, false, invalidSpec(ps)
		}
	case errors.Is(err, endpointclient.ErrNotFound):
		q, err := a.activityQueue(ctx, req.Cluster)
		if err != nil {
			return 0, false, err
		}
		err = a.endpoints.Create(ctx, req.Project, req.Endpoint, a.taskQueue, q, req.Spec)
		if err == nil {
			return 1, true, nil // a new endpoint's workflow starts with revision 1
		}
		if !errors.Is(err, endpointclient.ErrExists) {
			return 0, false, err
		}
		// Created meanwhile (by someone else, or by an execution of this
		// attempt whose heartbeat was lost): update it instead.
	case err != nil:
		return 0, false, err
	}
	rev, err := a.endpoints.UpdateSpec(ctx, req.Project, req.Endpoint, req.Spec)
	var rej *endpointclient.RejectedError
	switch {
	case errors.As(err, &rej) && len(rej.Problems) > 0:
		return 0, false, invalidSpec(rej.Problems)
	case errors.As(err, &rej):
		// Typically another rollout in progress: the step's retries may
		// try again once it is over.
		return 0, false, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("endpoint %q refused the spec: %s", req.Endpoint, rej.Message), activities.ErrTypeStepFailed, nil)
	case err != nil:
		return 0, false, err // includes ErrNotFound: deleted meanwhile; a retry creates it
	}
	return rev.Number, false, nil
}

// resolveModel records in the spec the registry version its model.ref
// names now and records the endpoint's reference to it before the spec is
// submitted, as the gateway does for an endpoint created over REST, so
// the version cannot be deleted from then on (catalog.ReferenceEndpointModel).
// A reference the registry does not hold, or a version deleted meanwhile,
// fails the step naming it.
func (a *Activities) resolveModel(ctx context.Context, req *activities.DeployEndpointRequest) error {
	if req.Spec.Model.Ref == "" {
		req.Spec.Model.Registered = nil // Atelier's to set, never the spec's
		return nil
	}
	if a.models == nil {
		return invalidSpec([]schema.Problem{{Path: "model.ref", Message: "this worker has no model registry to resolve it"}})
	}
	problem, err := catalog.ReferenceEndpointModel(ctx, a.models, a.models, req.Project, req.Endpoint, &req.Spec.Model)
	if err != nil {
		return fmt.Errorf("resolve model %s: %w", req.Spec.Model.Ref, err)
	}
	if problem != "" {
		return invalidSpec([]schema.Problem{{Path: "model.ref", Message: problem}})
	}
	return nil
}

// activityQueue is where a new endpoint's activities run: the local
// runtime (this worker's queue) or a registered cluster's queue.
func (a *Activities) activityQueue(ctx context.Context, cluster string) (string, error) {
	if cluster == "" {
		return a.taskQueue, nil
	}
	if a.clusters != nil {
		_, err := a.clusters.GetCluster(ctx, cluster)
		if errors.Is(err, catalog.ErrNotFound) {
			return "", temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("cluster %q is not registered: an endpoint runs on a cluster whose worker is up (GET /v1/clusters)", cluster),
				activities.ErrTypeInvalidStep, nil)
		}
		if err != nil {
			return "", fmt.Errorf("read cluster %q: %w", cluster, err)
		}
	}
	return activities.TaskQueueForCluster(cluster), nil
}

// wait polls the endpoint until revision hb.Revision serves or never
// will, heartbeating where its rollout is and reporting each new stage to
// the run.
func (a *Activities) wait(ctx context.Context, req activities.DeployEndpointRequest, hb activities.DeployProgress) (activities.DeployEndpointResult, error) {
	res := activities.DeployEndpointResult{Endpoint: req.Endpoint, Revision: hb.Revision, Created: hb.Created, StartedAt: hb.StartedAt}
	if hb.Created {
		res.Cluster = req.Cluster
	}
	tick := time.NewTicker(a.poll)
	defer tick.Stop()
	reported := ""
	for {
		qctx, cancel := context.WithTimeout(ctx, statusTimeout)
		st, err := a.endpoints.Status(qctx, req.Project, req.Endpoint)
		cancel()
		switch {
		case errors.Is(err, endpointclient.ErrNotFound):
			return res, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("endpoint %q was deleted while revision %d rolled out", req.Endpoint, hb.Revision), activities.ErrTypeRolloutFailed, nil)
		case err != nil && ctx.Err() != nil:
			return res, ctx.Err()
		case err != nil:
			// Temporal or the endpoint's worker is briefly unreachable:
			// the rollout goes on without us; keep asking.
			activity.GetLogger(ctx).Warn("cannot read the endpoint's status", "endpoint", req.Endpoint, "error", err)
			hb.Message = "cannot read the endpoint's status: " + err.Error()
		default:
			v := judge(st, hb.Revision)
			if v.done {
				res.FinishedAt = a.now()
				return res, nil
			}
			if v.failed != "" {
				return res, temporal.NewNonRetryableApplicationError(v.failed, activities.ErrTypeRolloutFailed, nil)
			}
			hb.Message = v.detail
			a.report(ctx, req, v.stage, &reported)
		}
		activity.RecordHeartbeat(ctx, hb)
		if req.Timeout > 0 && !a.now().Before(hb.StartedAt.Add(req.Timeout)) {
			return res, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("revision %d of endpoint %q did not finish rolling out within %s (%s); the rollout goes on",
					hb.Revision, req.Endpoint, req.Timeout, hb.Message), activities.ErrTypeStepTimeout, nil)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
	}
}

// report sends the run a stage it has not seen yet. A lost report only
// costs the message: the step goes on either way.
func (a *Activities) report(ctx context.Context, req activities.DeployEndpointRequest, stage string, last *string) {
	if stage == *last || a.progress == nil {
		return
	}
	*last = stage
	if err := a.progress(ctx, activities.StepProgress{Step: req.Step, Item: req.Item, Attempt: req.Attempt, Message: stage}); err != nil {
		activity.GetLogger(ctx).Warn("cannot report the rollout's stage to the run", "stage", stage, "error", err)
	}
}
