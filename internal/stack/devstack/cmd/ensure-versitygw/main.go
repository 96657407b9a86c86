// Command ensure-versitygw builds (once) and prints the path of the pinned
// versitygw S3 server (devstack.VersityGWVersion); with -version it also
// prints `versitygw --version`.
//
// `make test` runs it (make ensure-s3) before `go test ./...` because go
// test buffers each package's output: a first-time build inside an S3 test
// (internal/stack/s3test) would look like a hang. Here the progress is
// printed live (stderr).
package main

import "github.com/atelier-ml/atelier/internal/stack/devstack"

func main() {
	devstack.EnsureCommand("ensure-versitygw", devstack.EnsureVersityGW, "--version")
}
