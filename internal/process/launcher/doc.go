// Package launcher is what runs in a Kubernetes step's pod around the
// step's command when the step has artifacts (package launch has the
// contract). `atelier-launcher install DIR` (the init container) copies
// the binary into the pod's shared volume; `atelier-launcher run --
// COMMAND...` (the step's container) downloads the inputs, runs the
// command with $ATELIER_INPUTS, $ATELIER_ARTIFACTS and $ATELIER_OUTPUTS
// set, stores the outputs once it exited 0, and writes a launch.Result to
// the termination message. The command's exit code is the container's.
//
// The store's credentials never enter the pod: every object is read or
// written through a URL the gateway signs for the attempt's grant.
package launcher
