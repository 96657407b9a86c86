// Package framework is the generic part of Atelier's Kubernetes backends,
// in the style of Kueue's jobframework: what is common to every kind of
// object a step can become, so that an integration (a batch/v1 Job, a
// KubeRay RayJob, a SparkApplication, ...) is a small package implementing
// Kind.
//
//   - Resource and Kind: the interface an integration implements over its
//     typed clientset: build the desired object, create/get/delete/list/
//     watch it, read its progress as {Pending|Running|Succeeded|Failed,
//     reason, message, links}, and say which pod holds the outputs.
//   - Names and labels (ObjectName, Identity): deterministic names from run,
//     step, item and attempt; identity labels on every object.
//   - CreateOrAdopt: idempotent creation; an existing object is adopted only
//     when its identity labels say it is the same attempt.
//   - Apply: the long-lived kinds' create-or-merge-and-update; an object
//     Atelier does not manage, or manages for another identity, is never
//     modified.
//   - Informers: shared, label-filtered informers per kind, with per-object
//     subscriptions, so waiting for many steps costs one watch per kind.
//   - APIError: API server rejections become non-retryable InvalidStep
//     errors carrying the server's message; everything else stays
//     retryable.
//   - Outputs (ParseOutputs, OutputTermination): a step's outputs are the
//     JSON object its container writes to its termination message file.
package framework
