// Command ensure-helm builds (once) and prints the path of the pinned helm
// (devstack.HelmVersion); with -version it also prints `helm version`.
//
// `make test` runs it (make ensure-helm) before `go test ./...` because go
// test buffers each package's output: a first-time build of helm inside
// the chart test would look like a hang. Here the progress is printed live
// (stderr).
package main

import "github.com/atelier-ml/atelier/internal/stack/devstack"

func main() {
	devstack.EnsureCommand("ensure-helm", devstack.EnsureHelm, "version", "--short")
}
