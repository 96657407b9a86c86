// Package temporaltest gives tests a real Temporal dev server (see
// internal/stack/devstack) shared by every test in a test binary.
//
// Starting a dev server takes about a second and a few hundred MB, so a
// package starts at most one, lazily, on the first Server or Client call.
// Use Main in TestMain so it is stopped cleanly after the tests:
//
//	func TestMain(m *testing.M) { temporaltest.Main(m) }
//
// Without Main the server is still killed when the test binary exits (it is
// started with a parent-death signal on Linux), just less politely.
//
// Tests isolate themselves by task queue (TaskQueue) and workflow IDs, not
// by server: the namespace and its search attributes are shared.
//
// Why not go.temporal.io/sdk/testsuite.StartDevServer: it downloads the CLI
// from temporal.download unless given a path (no network in CI), does not
// put the server in its own process group or kill it when the test binary
// dies, and reports startup failures without the server's log. Building on
// devstack.StartTemporal also guarantees tests and `atelier dev` run the
// same binary with the same TunedDynamicConfig.
//
// With -short, Server skips the calling test, so `go test -short ./...`
// runs only unit tests and never builds the temporal CLI.
package temporaltest
