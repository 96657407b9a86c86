// Package runclient is the Temporal client side of Atelier's workflows:
// start a run idempotently, signal its cancellation, decide an approval
// step (an Update, DecideApproval), query its live
// status, tell how a closed run ended (Closure, ClosedOutside), build links
// to the Temporal UI, and check health. The names, signals, queries and
// search attributes it uses are package runstate's, which the workflows
// register, so the two cannot drift apart; it imports no workflow code.
// The gateway and the reconciler use it through small interfaces of their
// own.
//
// A run is exactly one workflow execution whose workflow ID is the run ID, so
// every operation here is addressed by run ID alone and a retried start can
// never create a second execution.
package runclient
