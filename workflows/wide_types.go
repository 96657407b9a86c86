package workflows

// Wide forEach (wide.go, widebatch.go): the types that travel between the
// pipeline workflow, its batch workflows, the item activities
// (activities/foreach) and the gateway.

// ForEachBatchWorkflowName is the registered name of the batch workflow of
// a wide forEach step.
const ForEachBatchWorkflowName = "atelier.ForEachBatch"

// SignalBatchStop tells a batch workflow to start no more items (another
// batch's failures used up what the step tolerates).
const SignalBatchStop = "atelier.foreach.stop"
