package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/db"
)

// UpsertCluster registers a cluster, or refreshes the registration of a
// known one, and reports whether it was created. Name and TaskQueue are
// required. A nil Labels or an empty Description keeps the stored value (an
// empty, non-nil Labels clears the labels): a cluster worker re-registers at
// every start and must not wipe what an admin set through the API. The
// timestamps are set by the database; capacity is left alone.
func (s *Store) UpsertCluster(ctx context.Context, c catalog.Cluster) (catalog.Cluster, bool, error) {
	if !catalog.ValidClusterName(c.Name) {
		return catalog.Cluster{}, false, invalid("cluster name %q must match %s", c.Name, catalog.ClusterNamePattern)
	}
	if c.TaskQueue == "" {
		return catalog.Cluster{}, false, invalid("cluster %q: empty task queue", c.Name)
	}
	var labels json.RawMessage
	if c.Labels != nil {
		var err error
		if labels, err = json.Marshal(c.Labels); err != nil {
			return catalog.Cluster{}, false, fmt.Errorf("upsert cluster %q: %w", c.Name, err)
		}
	}
	row, err := s.q.UpsertCluster(ctx, db.UpsertClusterParams{
		Name: c.Name, Description: strPtr(c.Description), Labels: labels, TaskQueue: c.TaskQueue,
	})
	if err != nil {
		return catalog.Cluster{}, false, mapErr(err, "upsert cluster %q", c.Name)
	}
	out, err := toCluster(db.Cluster{
		Name: row.Name, Description: row.Description, Labels: row.Labels, TaskQueue: row.TaskQueue,
		CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt, LastSeenAt: row.LastSeenAt, Capacity: row.Capacity,
	})
	return out, row.Inserted, err
}

// ReportClusterCapacity records a capacity snapshot taken at seenAt, which
// also marks the cluster as seen. A report older than the stored one is
// ignored (nil error), so concurrent worker replicas cannot move LastSeenAt
// backwards. ErrNotFound if the cluster is not registered, e.g. because an
// admin deleted it while its worker kept running.
func (s *Store) ReportClusterCapacity(ctx context.Context, name string, capacity catalog.ClusterCapacity, seenAt time.Time) error {
	data, err := json.Marshal(capacity)
	if err != nil {
		return fmt.Errorf("report capacity of cluster %q: %w", name, err)
	}
	n, err := s.q.ReportClusterCapacity(ctx, db.ReportClusterCapacityParams{Name: name, Capacity: data, SeenAt: seenAt.UTC()})
	if err != nil {
		return mapErr(err, "report capacity of cluster %q", name)
	}
	if n > 0 {
		return nil
	}
	// No row changed: either the report is stale (fine) or the cluster is gone.
	exists, err := s.q.ClusterExists(ctx, name)
	if err != nil {
		return mapErr(err, "report capacity of cluster %q", name)
	}
	if !exists {
		return fmt.Errorf("report capacity of cluster %q: %w", name, catalog.ErrNotFound)
	}
	return nil
}

// GetCluster returns one cluster or ErrNotFound.
func (s *Store) GetCluster(ctx context.Context, name string) (catalog.Cluster, error) {
	row, err := s.q.GetCluster(ctx, name)
	if err != nil {
		return catalog.Cluster{}, mapErr(err, "cluster %q", name)
	}
	return toCluster(row)
}

// ListClusters returns every registered cluster by name.
func (s *Store) ListClusters(ctx context.Context) ([]catalog.Cluster, error) {
	rows, err := s.q.ListClusters(ctx)
	if err != nil {
		return nil, mapErr(err, "list clusters")
	}
	out := make([]catalog.Cluster, len(rows))
	for i, r := range rows {
		if out[i], err = toCluster(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DeleteCluster removes a cluster from the registry, or returns
// ErrNotFound. Its worker, if still running, keeps polling but reports fail
// until it is restarted (which registers the cluster again).
func (s *Store) DeleteCluster(ctx context.Context, name string) error {
	n, err := s.q.DeleteCluster(ctx, name)
	if err != nil {
		return mapErr(err, "delete cluster %q", name)
	}
	if n == 0 {
		return fmt.Errorf("delete cluster %q: %w", name, catalog.ErrNotFound)
	}
	return nil
}

func toCluster(r db.Cluster) (catalog.Cluster, error) {
	c := catalog.Cluster{
		Name: r.Name, Description: r.Description, TaskQueue: r.TaskQueue, Labels: map[string]string{},
		CreatedAt: utc(r.CreatedAt), UpdatedAt: utc(r.UpdatedAt), LastSeenAt: utcPtr(r.LastSeenAt),
	}
	if len(r.Labels) > 0 {
		if err := json.Unmarshal(r.Labels, &c.Labels); err != nil {
			return catalog.Cluster{}, fmt.Errorf("cluster %q: stored labels: %v", r.Name, err)
		}
	}
	if len(r.Capacity) > 0 && string(r.Capacity) != "null" {
		c.Capacity = new(catalog.ClusterCapacity)
		if err := json.Unmarshal(r.Capacity, c.Capacity); err != nil {
			return catalog.Cluster{}, fmt.Errorf("cluster %q: stored capacity: %v", r.Name, err)
		}
	}
	return c, nil
}
