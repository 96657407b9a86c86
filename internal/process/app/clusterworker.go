package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube"
	"github.com/atelier-ml/atelier/activities/kube/serving"
	"github.com/atelier-ml/atelier/activities/placement"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/process/config"
)

// CapacityInterval is how often a cluster worker reports capacity. It is
// well inside catalog.ClusterOnlineWindow, so a few failed reports do not
// take a live cluster offline.
const CapacityInterval = 30 * time.Second

// capacityTimeout bounds one report (two paged lists and one write), so a
// hung API server delays the next report instead of stopping them.
const capacityTimeout = 20 * time.Second

// ClusterRegistry is what a cluster worker writes to the registry. The
// Postgres store implements it.
type ClusterRegistry interface {
	UpsertCluster(ctx context.Context, c catalog.Cluster) (catalog.Cluster, bool, error)
	ReportClusterCapacity(ctx context.Context, name string, capacity catalog.ClusterCapacity, seenAt time.Time) error
}

// poller is the part of a Temporal worker the lifecycle needs (a fake in
// tests).
type poller interface {
	Start() error
	Stop()
}

// ClusterWorker serves one Kubernetes cluster: it registers the cluster,
// polls the cluster's task queue for the Kubernetes backends' activities,
// and reports the cluster's capacity until its context ends. It registers
// no workflows: those run on the local-runtime workers, which send the
// steps here.
type ClusterWorker struct {
	w         poller
	reg       ClusterRegistry
	kube      kubernetes.Interface
	name      string
	labels    map[string]string
	kueue     string // the Kueue LocalQueue steps go to, reported with the capacity
	taskQueue string
	interval  time.Duration
	now       func() time.Time
	log       *zap.Logger
}

// NewClusterWorker builds the worker of cluster cfg.Cluster on
// activities.TaskQueueForCluster(cfg.Cluster), registering only the
// backend's activities.
func NewClusterWorker(c client.Client, cfg config.Config, clients kube.Clients, backend *kube.Backend, srv *serving.Serving, reg ClusterRegistry, l *zap.Logger) *ClusterWorker {
	q := activities.TaskQueueForCluster(cfg.Cluster)
	w := worker.New(c, q, worker.Options{
		MaxConcurrentActivityExecutionSize: cfg.WorkerConcurrency,
		// As on the local worker: heartbeats carry cancellation, so send
		// them often enough that a cancelled step's object is deleted
		// promptly.
		MaxHeartbeatThrottleInterval:     time.Second,
		DefaultHeartbeatThrottleInterval: time.Second,
		WorkerStopTimeout:                cfg.ShutdownTimeout,
		// Activities only: workflows run on the local task queue, and a
		// workflow poller here would only hold a connection open.
		DisableWorkflowWorker: true,
	})
	backend.Register(w)
	// Inference endpoints' activities (their entity workflows run on the
	// local task queue and send them here).
	srv.Register(w)
	srv.RegisterEndpoint(w)
	// The run's cleanup goes to the control queue (its own slots, so a
	// cluster full of running steps still cleans up ended runs).
	control := worker.New(c, activities.ControlTaskQueue(q), worker.Options{
		MaxConcurrentActivityExecutionSize: activities.ControlConcurrency,
		WorkerStopTimeout:                  cfg.ShutdownTimeout,
		DisableWorkflowWorker:              true,
	})
	backend.Register(control)
	return newClusterWorker(pollers{w, control}, cfg, clients.Kube, reg, l)
}

// pollers starts and stops several Temporal workers as one.
type pollers []poller

func (ps pollers) Start() error {
	for i, p := range ps {
		if err := p.Start(); err != nil {
			for _, started := range ps[:i] {
				started.Stop()
			}
			return err
		}
	}
	return nil
}

func (ps pollers) Stop() {
	for _, p := range ps {
		p.Stop()
	}
}

func newClusterWorker(w poller, cfg config.Config, k kubernetes.Interface, reg ClusterRegistry, l *zap.Logger) *ClusterWorker {
	return &ClusterWorker{
		w: w, reg: reg, kube: k,
		name: cfg.Cluster, labels: cfg.ClusterLabels, kueue: cfg.KueueQueue, taskQueue: activities.TaskQueueForCluster(cfg.Cluster),
		interval: CapacityInterval, now: time.Now,
		log: l.Named("cluster-worker").With(zap.String("cluster", cfg.Cluster)),
	}
}

// Run registers the cluster, starts polling, and reports capacity every
// CapacityInterval until ctx is cancelled. Only a failed registration or
// start is fatal: capacity errors (API server unreachable, RBAC missing)
// are logged and retried at the next tick, because steps can still run.
func (w *ClusterWorker) Run(ctx context.Context) error {
	// Nil labels keep what is registered (see ClusterRegistry.UpsertCluster).
	c, created, err := w.reg.UpsertCluster(ctx, catalog.Cluster{Name: w.name, Labels: w.labels, TaskQueue: w.taskQueue})
	if err != nil {
		return fmt.Errorf("register cluster %s: %w", w.name, err)
	}
	w.log.Info("cluster registered", zap.Bool("new", created), zap.Any("labels", c.Labels))
	if err := w.w.Start(); err != nil {
		return fmt.Errorf("start cluster worker: %w", err)
	}
	w.log.Info("cluster worker polling", zap.String("taskQueue", w.taskQueue))

	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		w.report(ctx)
		select {
		case <-ctx.Done():
			w.w.Stop()
			w.log.Info("cluster worker stopped")
			return nil
		case <-t.C:
		}
	}
}

// report measures and stores the capacity once, logging failures.
func (w *ClusterWorker) report(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, capacityTimeout)
	defer cancel()
	c, err := placement.MeasureCapacity(ctx, w.kube)
	if err != nil {
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			w.log.Warn("cannot measure cluster capacity; placement treats the cluster as offline once reports stop for 2m", zap.Error(err))
		}
		return
	}
	c.KueueQueue = w.kueue
	err = w.reg.ReportClusterCapacity(ctx, w.name, c, w.now())
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		// Re-registering here would undo an admin's deliberate removal.
		w.log.Warn("cluster is no longer registered (deleted?); restart this worker to register it again")
	case err != nil:
		w.log.Warn("cannot report cluster capacity", zap.Error(err))
	default:
		w.log.Debug("capacity reported", zap.Int("nodes", c.Nodes), zap.Int64("freeGPUs", c.FreeGPUs("")), zap.Int64("freeCPUMillis", c.CPUMillis.Free))
	}
}
