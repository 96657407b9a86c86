package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/workflows/spec"
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
func (s *server) RegisterCluster(c echo.Context) error {
	var req gen.RegisterClusterRequest
	if err := decodeJSON(c, &req, false); err != nil {
		return err
	}
	var labels map[string]string
	if req.Labels != nil {
		labels = map[string]string(*req.Labels)
		var fields []gen.FieldError
		for k, v := range labels {
			if msg := catalog.ClusterLabelProblem(k, v); msg != "" {
				fields = append(fields, gen.FieldError{Path: "labels." + k, Message: msg})
			}
		}
		if len(fields) > 0 {
			slices.SortFunc(fields, func(a, b gen.FieldError) int { return strings.Compare(a.Path, b.Path) })
			return newProblem(ptInvalid, "%s", summarize(fields)).withErrors(fields)
		}
	}
	cl, created, err := s.cat.UpsertCluster(c.Request().Context(), catalog.Cluster{
		Name:        req.Name,
		Description: deref(req.Description),
		Labels:      labels,
		TaskQueue:   activities.TaskQueueForCluster(req.Name),
	})
	if errors.Is(err, catalog.ErrInvalidArgument) {
		return newProblem(ptInvalid, "%s", err.Error())
	}
	if err != nil {
		return internalError(err)
	}
	if !created {
		return c.JSON(http.StatusOK, s.clusterView(cl))
	}
	c.Response().Header().Set(echo.HeaderLocation, s.link("/v1/clusters/%s", cl.Name))
	return c.JSON(http.StatusCreated, s.clusterView(cl))
}

// ListClusters lists every cluster; any valid token may (clusters are
// shared infrastructure, and users choose placements from this list).
func (s *server) ListClusters(c echo.Context) error {
	list, err := s.cat.ListClusters(c.Request().Context())
	if err != nil {
		return internalError(err)
	}
	out := make([]gen.Cluster, len(list))
	for i, cl := range list {
		out[i] = s.clusterView(cl)
	}
	return c.JSON(http.StatusOK, gen.ClusterList{Clusters: out})
}

// GetCluster returns one cluster with its capacity and online state.
func (s *server) GetCluster(c echo.Context, name string) error {
	cl, err := s.cat.GetCluster(c.Request().Context(), name)
	if errors.Is(err, catalog.ErrNotFound) {
		return notFound("cluster %q is not registered", name)
	}
	if err != nil {
		return internalError(err)
	}
	return c.JSON(http.StatusOK, s.clusterView(cl))
}

// DeleteCluster removes a cluster from the registry (admin).
func (s *server) DeleteCluster(c echo.Context, name string) error {
	err := s.cat.DeleteCluster(c.Request().Context(), name)
	if errors.Is(err, catalog.ErrNotFound) {
		return notFound("cluster %q is not registered", name)
	}
	if err != nil {
		return internalError(err)
	}
	return c.NoContent(http.StatusNoContent)
}

// clusterView adds what the registry does not store: whether the worker is
// online, judged by the gateway's clock.
func (s *server) clusterView(cl catalog.Cluster) gen.Cluster {
	labels := cl.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	v := gen.Cluster{
		Name:       cl.Name,
		Labels:     labels,
		TaskQueue:  cl.TaskQueue,
		CreatedAt:  cl.CreatedAt,
		UpdatedAt:  cl.UpdatedAt,
		LastSeenAt: cl.LastSeenAt,
		Online:     cl.Online(s.now()),
		Capacity:   cl.Capacity,
	}
	if cl.Description != "" {
		v.Description = &cl.Description
	}
	return v
}

// validateOptions describes what pipeline versions may use now: ray and
// spark steps (and placement) need a Kubernetes cluster, so they are allowed
// once at least one is registered. It is computed per request (one small
// query on a rare operation) so registering the first cluster needs no
// gateway restart.
func (s *server) validateOptions(ctx context.Context) (spec.ValidateOptions, error) {
	clusters, err := s.cat.ListClusters(ctx)
	if err != nil {
		return spec.ValidateOptions{}, err
	}
	if len(clusters) == 0 {
		return spec.ValidateOptions{Kinds: []spec.StepKind{spec.KindContainer}}, nil
	}
	return spec.ValidateOptions{Kinds: []spec.StepKind{spec.KindContainer, spec.KindRay, spec.KindSpark}, Kubernetes: true}, nil
}
