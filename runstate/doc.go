// Package runstate is the vocabulary of runs: what a run and each of its
// steps and forEach items are (states, Status, StepStatus, Attempt,
// ItemRecord, WideRef), the messages people send a run (CancelRequest,
// ApprovalRequest), the retry plan (Reuse), and the names the pipeline
// workflow is registered and found by (PipelineWorkflowName, the cancel
// signal, the status query, the approval update, search attributes, the
// local task queue).
//
// The workflows write these values, activities mirror them to Postgres,
// the catalogue stores them, the gateway serves them and the Temporal
// clients send and read them: all of them import this package, and it
// imports nothing of the engine (only the pipeline language, for a step's
// placement), so none of them depends on workflow code to name a state.
// Every type here is part of recorded histories and stored rows: its JSON
// never changes shape.
package runstate
