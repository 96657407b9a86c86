// Command ensure-temporal builds (once) and prints the path of the pinned
// temporal CLI (devstack.TemporalCLIVersion); with -version it also prints
// the CLI's own version line.
//
// `make test` runs it before `go test ./...` because go test buffers each
// package's output: a first-time ~10 minute CLI build inside a test binary
// would look like a hang. Here the progress is printed live (stderr).
package main

import "github.com/atelier-ml/atelier/internal/stack/devstack"

func main() {
	devstack.EnsureCommand("ensure-temporal", devstack.EnsureTemporalCLI, "--version")
}
