// Package integration holds Atelier's end-to-end tests against real
// components: the Temporal dev server from the pinned temporal CLI, a real
// Postgres, the real gateway over HTTP and real workers (in-process, or the
// atelier binary as a child process where a test kills it with SIGKILL).
// They run under plain `go test` (and `make test`); -short skips them.
// They drive the REST API through the generated client (api/gen) with
// its typed requests, responses and problems, as a Go program would (the
// helpers are in harness_test.go); raw HTTP is left to what the client
// cannot send: a body off the schema, a link the API returned, and the
// endpoints' own API behind the gateway's proxy.
// webui_test.go drives the web UI in headless Chromium (chromedp); it
// skips when no browser is installed, except under `make test`, which
// installs one and requires it. realnode_test.go runs container steps on
// kubetest's real node (kubelet, containerd, runc); it skips where the
// node cannot start (not root, packages missing), saying what is missing,
// except with ATELIER_REQUIRE_NODE=1 (.ci/run), which makes it fail.
package integration
