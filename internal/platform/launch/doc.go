// Package launch is the contract between the three parties that move a
// Kubernetes step's artifacts without giving its pod the store's
// credentials (docs/architecture.md, "Artifacts on Kubernetes"):
//
//   - the cluster worker builds the step's pod: an init container copies
//     the small static launcher binary (cmd/atelier-launcher) into a
//     shared volume, and the step's container runs the launcher, which
//     runs the step's command. The worker hands the launcher a Spec (what
//     to download, what to upload, where the gateway is) in the pod's
//     environment and a Grant, sealed, in the attempt's Secret;
//   - the launcher (internal/process/launcher) places the inputs, runs the
//     command, stores the outputs, and writes a Result to the container's
//     termination message, which the worker reads;
//   - the gateway (api, launcher.go) opens grants and answers a launcher's
//     requests with short-lived signed URLs scoped to one object, or, for
//     a store that cannot sign (a directory), moves the bytes itself.
//
// A grant reaches only its attempt's inputs (and the files of input
// directories) for reading, and its project's store for writing objects
// whose bytes the store or the gateway checks against their digest. It
// dies with its run and at its expiry. The step's own code shares the
// container with the launcher, so it could read the grant: a grant lets
// it do nothing the step may not do anyway.
package launch
