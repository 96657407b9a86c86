package api

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
)

// ClusterLister lists the registered Kubernetes clusters. Spec validation
// needs only this: which step kinds a pipeline may use depends on whether
// any cluster is registered.
type ClusterLister interface {
	ListClusters(ctx context.Context) ([]catalog.Cluster, error)
}

// ClusterStore is the cluster registry. Clusters are normally registered by
// their own worker; the API lets admins register them ahead of time, set
// labels and remove them.
type ClusterStore interface {
	ClusterLister
	// UpsertCluster keeps the stored labels when Labels is nil and the
	// stored description when Description is empty.
	UpsertCluster(ctx context.Context, c catalog.Cluster) (catalog.Cluster, bool, error)
	GetCluster(ctx context.Context, name string) (catalog.Cluster, error)
	DeleteCluster(ctx context.Context, name string) error
}

// RegisterCluster registers a cluster or updates its description and
// labels (admin). The task queue always follows from the name, so a client
// cannot point a cluster at another worker's queue.
func (s *server) RegisterCluster(ctx context.Context, req gen.RegisterClusterRequestObject) (gen.RegisterClusterResponseObject, error) {
	body := deref(req.Body)
	var labels map[string]string
	if body.Labels != nil {
		labels = map[string]string(*body.Labels)
		var fields []gen.FieldError
		for k, v := range labels {
			if msg := catalog.ClusterLabelProblem(k, v); msg != "" {
				fields = append(fields, gen.FieldError{Path: "labels." + k, Message: msg})
			}
		}
		if len(fields) > 0 {
			slices.SortFunc(fields, func(a, b gen.FieldError) int { return strings.Compare(a.Path, b.Path) })
			return nil, newProblem(ptInvalid, "%s", summarize(fields)).withErrors(fields)
		}
	}
	cl, created, err := s.cat.UpsertCluster(ctx, catalog.Cluster{
		Name:        body.Name,
		Description: deref(body.Description),
		Labels:      labels,
		TaskQueue:   activities.TaskQueueForCluster(body.Name),
	})
	if errors.Is(err, catalog.ErrInvalidArgument) {
		return nil, newProblem(ptInvalid, "%s", err.Error())
	}
	if err != nil {
		return nil, internalError(err)
	}
	if !created {
		return gen.RegisterCluster200JSONResponse(s.clusterView(cl)), nil
	}
	return gen.RegisterCluster201JSONResponse{
		Body:    s.clusterView(cl),
		Headers: gen.RegisterCluster201ResponseHeaders{Location: s.link("/v1/clusters/%s", cl.Name)},
	}, nil
}

// ListClusters lists every cluster; any valid token may (clusters are
// shared infrastructure, and users choose placements from this list).
func (s *server) ListClusters(ctx context.Context, _ gen.ListClustersRequestObject) (gen.ListClustersResponseObject, error) {
	list, err := s.cat.ListClusters(ctx)
	if err != nil {
		return nil, internalError(err)
	}
	return gen.ListClusters200JSONResponse{Clusters: views(list, s.clusterView)}, nil
}

// GetCluster returns one cluster with its capacity and online state.
func (s *server) GetCluster(ctx context.Context, req gen.GetClusterRequestObject) (gen.GetClusterResponseObject, error) {
	cl, err := s.cat.GetCluster(ctx, req.Cluster)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, notFound("cluster %q is not registered", req.Cluster)
	}
	if err != nil {
		return nil, internalError(err)
	}
	return gen.GetCluster200JSONResponse(s.clusterView(cl)), nil
}

// DeleteCluster removes a cluster from the registry (admin).
func (s *server) DeleteCluster(ctx context.Context, req gen.DeleteClusterRequestObject) (gen.DeleteClusterResponseObject, error) {
	err := s.cat.DeleteCluster(ctx, req.Cluster)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, notFound("cluster %q is not registered", req.Cluster)
	}
	if err != nil {
		return nil, internalError(err)
	}
	return gen.DeleteCluster204Response{}, nil
}

// validateOptions describes what pipeline versions may use now: ray,
// spark and inference steps (and placement) need a Kubernetes cluster, so
// they are allowed once at least one is registered. It is computed per
// request (one small query on a rare operation) so registering the first
// cluster needs no gateway restart. Inference steps are always allowed:
// without a cluster their endpoint runs on the local runtime
// (LocalEndpoints).
func (s *server) validateOptions(ctx context.Context) (pipeline.ValidateOptions, error) {
	clusters, err := s.cat.ListClusters(ctx)
	if err != nil {
		return pipeline.ValidateOptions{}, err
	}
	if len(clusters) == 0 {
		return pipeline.ValidateOptions{Kinds: []pipeline.StepKind{pipeline.KindContainer, pipeline.KindInference}, LocalEndpoints: true}, nil
	}
	return pipeline.ValidateOptions{Kinds: []pipeline.StepKind{pipeline.KindContainer, pipeline.KindRay, pipeline.KindSpark, pipeline.KindInference}, Kubernetes: true, LocalEndpoints: true}, nil
}
