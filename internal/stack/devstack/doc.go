// Package devstack starts the pieces a developer machine (and the test
// suite) needs to run Atelier locally: a Temporal dev server from a pinned
// temporal CLI, and Postgres.
//
// The Temporal side is deliberately the real server (`temporal server
// start-dev`), not the SDK's in-process test environment, so that local runs
// and integration tests exercise the same history, matching and visibility
// code paths as production. Two things make that practical:
//
//   - EnsureTemporalCLI pins the CLI to TemporalCLIVersion and builds it once
//     with `go install` into ~/.cache/atelier/temporal-<version>/ (the only
//     registry a developer machine or CI is guaranteed to reach is the Go
//     module proxy, so we cannot download release binaries). The first build
//     takes ~10 minutes on two cores, so it reports progress, and a lock file
//     keeps parallel callers (e.g. test binaries) from building twice.
//   - StartTemporal applies TunedDynamicConfig, which takes an activity round
//     trip on the dev server from ~100 ms to a few ms. Without it every
//     pipeline step in a test pays a tenth of a second of pure polling delay.
//
// EnsureHelm builds the pinned helm (HelmVersion) the same way, for the
// chart test in deploy/helm, and EnsureVersityGW the pinned versitygw
// (VersityGWVersion), the S3 server of internal/stack/s3test; all go
// through goTool, the one place that knows how to build a tool once from
// the module proxy with progress.
//
// Tests should not call StartTemporal directly; package
// internal/stack/temporaltest shares one server per test binary.
package devstack
