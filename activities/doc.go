// Package activities holds the contract between pipeline workflows and the
// activities that do real work: registered activity names, request/result
// types, application error types and task queue names. Implementations
// live in sub-packages, one per runtime or concern: local (the local
// runtime, inference endpoints' replicas as processes included), kube (the
// Kubernetes backends: a framework plus one package per kind; kube/serving,
// inference endpoints' Deployments, Services and HTTPRoutes), enginemetrics
// (serving engines' Prometheus metrics, read by both runtimes), placement
// (cluster selection and capacity), mirror (the Postgres mirror of a run's
// status), stepcache (the step cache's lookup and store, run as local
// activities), admission (GPU admission: submitting a step's GPU gang to its
// cluster's admission workflow, loading its snapshot), deploy (inference
// pipeline steps: creating or updating an endpoint through its workflow
// and waiting for the revision's rollout), pipelines (the stored pipeline a
// pipeline step runs as a child run).
package activities
