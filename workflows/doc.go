// Package workflows holds Atelier's Temporal workflows and the small public
// Go API for writing pipelines as native Go workflows.
//
// Every pipeline, declarative or Go, records its progress through a Run
// (Begin ... End): a RunStatus served by the "status" query, a "cancel"
// signal carrying reason and requester, the AtelierState search attribute,
// and a copy in Postgres written by the mirror activity. PipelineWorkflow
// interprets a declarative spec (package spec) with the same building
// blocks, so both kinds of pipeline look the same through REST, the Temporal
// UI and the CLI.
//
// AdmissionWorkflow owns one cluster's GPU queue (admission.go): GPU steps
// of every run submit to it and wait, durably, for its answer (gpu_step.go);
// it decides with the pure scheduler of package gpu.
//
// EndpointWorkflow owns one inference endpoint (endpoint.go): it observes
// its revisions every tick, sizes them with the autoscaler and steps their
// rollouts (package inference), and is the only writer of their replicas
// and traffic; Updates change its spec, roll it back, promote, abort or
// delete it. Its client is package endpointclient.
//
// Pipelines deploy endpoints with inference steps (inference.go; Run.Inference
// in Go, kind inference in a spec): each attempt is one activity
// (activities.DeployEndpointName, package activities/deploy) that creates
// or updates the endpoint through its workflow and waits until the
// revision it made is promoted, failing with the gate's message if it is
// rolled back.
//
// Pipeline steps (child.go; Run.Pipeline in Go, kind pipeline in a spec)
// run another stored pipeline of the project as a child PipelineWorkflow:
// the version is resolved by an activity when the attempt starts
// (activities.ResolvePipelineName), the child's ID derives from the run,
// step, item and attempt, its outputs (spec.Pipeline.Outputs, returned as
// PipelineResult) become the step's, and cancelling the parent signals the
// child to cancel and waits for its cleanup. Child runs nest at most
// spec.MaxPipelineDepth levels.
//
// Steps run as their dependencies' final states allow (runif.go): each
// step's trigger rule (spec.RunIf: allSucceeded by default, noneFailed,
// allDone, anyFailed) decides from its direct dependencies; after a step
// fails, only allDone and anyFailed steps still start.
//
// Approval steps (approval.go; Run.Approval in Go, kind approval in a spec)
// wait in WAITING_FOR_APPROVAL, holding no activity, for the
// UpdateApproval update (REST approve/reject through package runclient),
// whose validator refuses an unknown step, a step not waiting, a role the
// step does not allow and a missing required comment before anything
// reaches history; an optional timeout decides by itself.
//
// Exit handlers (onexit.go; spec onExit, Run.OnExit in Go) run once the
// steps have ended, whatever the outcome, in a context of their own with
// their own timeout; the run's state stays the steps' outcome. A step
// failure and an approval request are mirrored to Postgres when they
// happen, for webhooks (internal/services/webhooks).

// Steps with caching (cache.go; WithCache in Go, cache in a spec) are
// keyed on their rendered work and looked up in the project's step cache
// by a local activity before they run; a hit ends them CACHED with the
// stored outputs and its source (CachedFrom, which a retry's reuse
// fills too), a success is stored by another local activity.
//
// A retry of a native Go pipeline run (goretry.go) starts the same
// workflow with the same input and, in its start memo (MemoReuse), the
// steps of the retried run to reuse by name (PlanGoRetry): Run.Container
// and the other step calls return their outputs at once, CACHED with
// CachedFrom. A declarative retry carries the same plan (Reuse) in its
// PipelineInput.
//
// A native Go pipeline:
//
//	func Train(ctx workflow.Context, in TrainInput) (TrainResult, error) {
//		run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{})
//		if err != nil {
//			return TrainResult{}, err
//		}
//		out, err := run.Container(ctx, "prepare", spec.Container{Command: []string{"sh", "-c", "..."}}).Get(ctx)
//		...
//		return res, run.End(res, err)
//	}
//
// Workflow code here must stay deterministic (see docs/architecture.md):
// only workflow.Now/Sleep/Go/Await, no map ranging that affects commands,
// no I/O. `make lint` runs workflowcheck over this package.
package workflows
