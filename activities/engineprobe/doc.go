// Package engineprobe sends synthetic requests to a serving engine's
// replicas: what a rollout asks for when its traffic gates lack samples
// (inference.GateSettings.SyntheticProbes). vLLM gets a one-token
// completion of the served model; Triton, which has no model-independent
// inference request, gets its model's readiness endpoint. Answers are
// counted like the gateway counts real traffic (a 5xx is an error, with
// its latency); a replica that cannot be reached is not a sample at all,
// so a worker that cannot reach the pods never fails a rollout by itself.
package engineprobe
