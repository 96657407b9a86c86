package placement

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// ClusterReader reads the cluster registry. The Postgres store implements
// it; the interface lives with its consumer.
type ClusterReader interface {
	ListClusters(ctx context.Context) ([]catalog.Cluster, error)
}

// Selector is the activity that picks a cluster for a Kubernetes step. It
// runs on the pipeline's own task queue (the local worker), because only
// that worker is sure to be up and to reach the registry.
type Selector struct {
	store ClusterReader
	now   func() time.Time
	log   *zap.Logger
}

// New returns a Selector reading store. clock is the time source for the
// online check (nil: time.Now); a nil logger logs nothing.
func New(store ClusterReader, clock func() time.Time, logger *zap.Logger) *Selector {
	if clock == nil {
		clock = time.Now
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Selector{store: store, now: clock, log: logger}
}

// Register registers SelectCluster under its contract name, which workflow
// histories refer to.
func (s *Selector) Register(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(s.SelectCluster, activity.RegisterOptions{Name: activities.SelectClusterName})
	reg.RegisterActivityWithOptions(s.SelectClusters, activity.RegisterOptions{Name: activities.SelectClustersName})
}

// SelectClusters answers several requests with one read of the registry: a
// request nothing matches gets its reason, the others their cluster.
func (s *Selector) SelectClusters(ctx context.Context, req activities.SelectClustersRequest) (activities.SelectClustersResult, error) {
	out := activities.SelectClustersResult{Results: make([]activities.SelectClusterOutcome, len(req.Requests))}
	list, err := s.store.ListClusters(ctx)
	if err != nil {
		return out, fmt.Errorf("read cluster registry: %w", err)
	}
	now := s.now()
	for i, r := range req.Requests {
		res, err := Choose(list, r, now)
		var nc *NoClusterError
		switch {
		case errors.As(err, &nc):
			out.Results[i].NoCluster = nc.Msg
		case err != nil:
			return out, err
		default:
			out.Results[i].SelectClusterResult = res
		}
	}
	return out, nil
}

// SelectCluster reads the registry and applies Choose. Registry errors are
// returned as is, so Temporal retries them (a database blip is transient);
// "nothing matches" is non-retryable ErrTypeNoCluster, since retrying cannot
// make a cluster appear within any sensible retry window.
func (s *Selector) SelectCluster(ctx context.Context, req activities.SelectClusterRequest) (activities.SelectClusterResult, error) {
	list, err := s.store.ListClusters(ctx)
	if err != nil {
		return activities.SelectClusterResult{}, fmt.Errorf("read cluster registry: %w", err)
	}
	res, err := Choose(list, req, s.now())
	var nc *NoClusterError
	if errors.As(err, &nc) {
		s.log.Info("no cluster for step", zap.String("project", req.Project), zap.String("step", req.Step), zap.String("why", nc.Msg))
		return activities.SelectClusterResult{}, temporal.NewNonRetryableApplicationError(nc.Msg, activities.ErrTypeNoCluster, nil)
	}
	if err != nil {
		return activities.SelectClusterResult{}, err
	}
	s.log.Debug("cluster selected", zap.String("project", req.Project), zap.String("step", req.Step),
		zap.String("cluster", res.Cluster), zap.String("reason", res.Reason))
	return res, nil
}
