// Package workflows runs pipelines: the small Go API for writing a pipeline
// as a native Go workflow, and the generic workflow that interprets a
// declarative one (package pipeline). Both record their progress through a
// Run, so they look the same through REST, the Temporal UI and the CLI.
//
// A native Go pipeline:
//
//	func Train(ctx workflow.Context, in TrainInput) (TrainResult, error) {
//		run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{})
//		if err != nil {
//			return TrainResult{}, err
//		}
//		out, err := run.Container(ctx, "prepare", pipeline.Container{Command: []string{"sh", "-c", "..."}}).Get(ctx)
//		...
//		return res, run.End(res, err)
//	}
//
// Begin starts the record; Run.Container, Run.Ray, Run.Spark,
// Run.Inference, Run.RayCluster, Run.Pipeline and Run.Approval start steps
// (WithPlacement, WithCache, WithRetries, WithTimeout shape them);
// Run.ForEach fans out and Run.Reduce reduces; Run.OnExit adds exit
// handlers; End ends the run. Register a pipeline with a GoPipeline.
// Examples: examples/gopipeline.
//
// A run's record is a runstate.Status served by the "status" query, a
// "cancel" signal carrying reason and requester, the AtelierState search
// attribute, and a copy in Postgres written by the mirror activity.
// PipelineWorkflow interprets a declarative spec with the same building
// blocks. Where each feature lives:
//
//   - run.go: Begin, the Run record, End; status.go is in package runstate.
//   - pipeline.go: PipelineWorkflow, the DAG; runif.go: trigger rules
//     (allSucceeded, noneFailed, allDone, anyFailed) from a step's direct
//     dependencies.
//   - step.go, kube.go: one step's attempts, on the local runtime or on a
//     cluster (selectCluster, GPU admission in gpu_step.go through the
//     cluster's admission workflow, package workflows/admission).
//   - foreach.go, wide*.go: forEach fan-out; past 1,000 items through
//     ForEachBatch child workflows (widebatch.go) that run the same steps.
//   - child.go: pipeline steps, a child PipelineWorkflow per attempt,
//     nesting at most pipeline.MaxPipelineDepth levels.
//   - approval.go: approval steps waiting, holding no activity, for the
//     UpdateApproval update, whose validator refuses an unknown step, a
//     step not waiting, a role the step does not allow and a missing
//     comment before anything reaches history.
//   - onexit.go: exit handlers, run once the steps have ended in a context
//     of their own; the run's state stays the steps' outcome.
//   - inference.go: inference steps, one activity per attempt that creates
//     or updates an endpoint through its workflow (package
//     workflows/endpoint) and waits for the revision's rollout.
//   - cache.go: step caching, looked up and stored by local activities; a
//     hit ends the step CACHED with its source (CachedFrom).
//   - goretry.go, pipelineinput.go: retry from failure; a Go pipeline's plan
//     travels in its start memo (runstate.MemoReuse), a declarative one in
//     its input.
//   - temporalui.go: the Markdown table the Temporal UI shows; historylimits.go:
//     Temporal's history limits; metrics.go: replay-safe metrics.
//
// The other workflow families have packages of their own: the GPU
// admission workflow of a cluster (workflows/admission) and the entity
// workflow of an inference endpoint (workflows/endpoint). Workflows reach
// the world only through activities: they import the activity contract
// (package activities) and the domain, never an activity's implementation
// (internal/layers checks it).
//
// Code here must stay deterministic (see docs/architecture.md): only
// workflow.Now/Sleep/Go/Await, no map ranging that affects commands, no
// I/O. `make lint` runs workflowcheck over this package.
package workflows
