package devstack

import "context"

// VersityGWVersion is the versitygw release the S3 tests run
// (internal/stack/s3test): a real S3 server whose posix backend serves a
// directory. Built from the Go module proxy like helm, never added to the
// project's go.mod.
const VersityGWVersion = "v1.7.0"

// versityGWCommit is the short commit VersityGWVersion is tagged at (the
// module proxy's Origin.Hash), what upstream's Makefile stamps as the build.
const versityGWCommit = "8a3dbcf"

// EnvVersityGW names the environment variable that points at an existing
// versitygw binary, skipping the pinned build.
const EnvVersityGW = "ATELIER_VERSITYGW"

var versityGWTool = goTool{
	name:    "versitygw",
	exe:     "versitygw",
	dir:     "versitygw-" + VersityGWVersion,
	pkg:     "github.com/versity/versitygw/cmd/versitygw",
	version: VersityGWVersion,
	// What upstream's Makefile stamps, so `versitygw --version` tells which
	// pinned server is running; the build time is left unset ("none") so
	// the build does not depend on the clock.
	ldflags: "-X main.Version=" + VersityGWVersion +
		" -X main.Build=" + versityGWCommit,
	// Measured here on 2026-11-28: 1m40s wall clock on 2 cores shared with
	// other builds (load ~9), 1m20s of CPU, its modules downloaded in that
	// time; 2m12s (1m49s of CPU) with an empty build cache, the standard
	// library included. 67 MB binary.
	estimate: "1-3 min on 2 cores",
	env:      EnvVersityGW,
}

// VersityGWPath returns where the pinned versitygw lives (or will live once
// built), without building it.
func VersityGWPath() (string, error) { return versityGWTool.path() }

// EnsureVersityGW returns the path of a versitygw binary: $ATELIER_VERSITYGW
// if set (must exist), else <CacheDir>/versitygw-<VersityGWVersion>/versitygw,
// built with `go install` on first use with progress sent to log (may be
// nil), as EnsureHelm.
func EnsureVersityGW(ctx context.Context, log func(string, ...any)) (string, error) {
	return versityGWTool.ensure(ctx, log)
}
