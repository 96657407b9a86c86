// Command ensure-local-kms builds (once) and prints the path of the pinned
// local-kms server (devstack.LocalKMSVersion), the AWS KMS the secrets
// tests seal with.
//
// `make test` runs it (make ensure-kms) before `go test ./...` so that a
// first-time build is not hidden in a test's buffered output.
package main

import "github.com/atelier-ml/atelier/internal/stack/devstack"

func main() {
	devstack.EnsureCommand("ensure-local-kms", devstack.EnsureLocalKMS)
}
