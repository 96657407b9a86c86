package app

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/admission"
	"github.com/atelier-ml/atelier/activities/deploy"
	"github.com/atelier-ml/atelier/activities/foreach"
	"github.com/atelier-ml/atelier/activities/imports"
	"github.com/atelier-ml/atelier/activities/lineage"
	"github.com/atelier-ml/atelier/activities/local"
	"github.com/atelier-ml/atelier/activities/mirror"
	"github.com/atelier-ml/atelier/activities/models"
	"github.com/atelier-ml/atelier/activities/pipelines"
	"github.com/atelier-ml/atelier/activities/placement"
	"github.com/atelier-ml/atelier/activities/stepcache"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/process/config"
	"github.com/atelier-ml/atelier/workflows"
)

// GoWorkflowPublisher records which native Go pipelines this worker serves so
// the gateway can start them by name.
type GoWorkflowPublisher interface {
	UpsertGoWorkflow(ctx context.Context, w catalog.GoWorkflow) error
}

// Worker polls the local runtime's task queue and runs pipeline workflows
// and their local activities: containers, inference steps (which talk to
// endpoint workflows, not to a cluster), inference endpoints' replicas
// (endpoints created without a cluster), the catalogue mirror, cluster
// selection (which reads the registry, so it runs here rather than on a
// cluster's worker, which may be the one that is down), the step cache,
// and the pipeline versions that pipeline steps run as child runs (from
// the catalogue).
type Worker struct {
	w         worker.Worker
	control   worker.Worker // bookkeeping activities, own slots
	serving   *local.Serving
	pub       GoWorkflowPublisher
	pipelines []workflows.GoPipeline
	taskQueue string
	log       *zap.Logger
}

// NewWorker registers every workflow and activity on a Temporal worker.
func NewWorker(c client.Client, cfg config.Config, runner *local.Runner, serving *local.Serving, mirror *mirror.Mirror, selector *placement.Selector, admit *admission.Activities, deployer *deploy.Activities, cache *stepcache.Activities, refs *lineage.Activities, imports *imports.Activities, registry *models.Activities, resolver *pipelines.Resolver, items *foreach.Activities, pub GoWorkflowPublisher, goPipelines []workflows.GoPipeline, l *zap.Logger) *Worker {
	w := worker.New(c, cfg.TaskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize: cfg.WorkerConcurrency,
		// Heartbeats carry cancellation to running processes; sending them
		// at least every second bounds how long a cancelled step keeps
		// running.
		MaxHeartbeatThrottleInterval:     time.Second,
		DefaultHeartbeatThrottleInterval: time.Second,
		WorkerStopTimeout:                cfg.ShutdownTimeout,
	})
	workflows.Register(w, goPipelines...)
	runner.Register(w)
	// Inference steps wait for whole rollouts: step slots, not the short
	// control slots.
	deployer.Register(w)
	// The endpoint workflows of local endpoints run on this queue and
	// schedule their activities here too (api: an endpoint without a
	// cluster).
	serving.Register(w)
	// Bookkeeping stays registered on the step queue too: runs started
	// before control queues existed still schedule it there.
	mirror.Register(w)
	selector.Register(w)
	control := worker.New(c, activities.ControlTaskQueue(cfg.TaskQueue), worker.Options{
		MaxConcurrentActivityExecutionSize: activities.ControlConcurrency,
		WorkerStopTimeout:                  cfg.ShutdownTimeout,
		DisableWorkflowWorker:              true,
	})
	mirror.Register(control)
	selector.Register(control)
	// Pipeline steps resolve their child's version here (only runs with
	// control queues have pipeline steps).
	resolver.Register(control)
	// Wide forEach bookkeeping (item records, renders over their outputs):
	// control slots, so a fan-out's own items never starve it.
	items.Register(control)
	// GPU admission: submissions on the control queue; the snapshot runs as
	// a local activity of the admission workflows on the main queue.
	admit.Register(control)
	admit.Register(w)
	// The step cache's lookup and store are local activities of the
	// pipeline workflows: registered where the workflows run.
	cache.Register(w)
	// So is the resolution of a step's catalogue inputs (artifact IDs,
	// model versions), run before such a step.
	refs.Register(w)
	// Imports of URI inputs move bytes of any size: step slots.
	imports.Register(w)
	// Alias moves (workflows/models, promote steps) and endpoints
	// following an alias reach the registry on the control queue, so that
	// long steps filling the step slots cannot hold them up; registered on
	// the step queue too, where the alias-move workflow schedules them.
	registry.Register(w)
	registry.Register(control)
	return &Worker{w: w, control: control, serving: serving, pub: pub, pipelines: goPipelines, taskQueue: cfg.TaskQueue, log: l.Named("worker")}
}

// Registry lets a caller register more workflows and activities before Run
// (benchmarks register their baselines on the very worker they compare with).
func (w *Worker) Registry() worker.Registry { return w.w }

// Run publishes the Go pipelines, then polls until ctx is cancelled.
func (w *Worker) Run(ctx context.Context) error {
	for _, p := range w.pipelines {
		if err := w.pub.UpsertGoWorkflow(ctx, catalog.GoWorkflow{Name: p.Name, Description: p.Description, TaskQueue: w.taskQueue}); err != nil {
			return fmt.Errorf("publish Go pipeline %s: %w", p.Name, err)
		}
	}
	if err := w.control.Start(); err != nil {
		return fmt.Errorf("start control worker: %w", err)
	}
	defer w.control.Stop()
	if err := w.w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	w.log.Info("worker polling", zap.String("taskQueue", w.taskQueue), zap.Int("goPipelines", len(w.pipelines)))
	<-ctx.Done()
	w.w.Stop()
	// After the poller: no layout starts replicas behind the stop. The
	// endpoints' layouts stay recorded for the next worker process.
	w.serving.Close()
	w.log.Info("worker stopped")
	return nil
}
