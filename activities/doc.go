// Package activities holds the contract between pipeline workflows and the
// activities that do real work: registered activity names, request/result
// types and application error types. Implementations live in sub-packages,
// one per runtime or concern (local, catalog; kubernetes backends later).
package activities
