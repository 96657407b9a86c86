package devstack

import "context"

// LocalKMSVersion is the local-kms build the secrets tests run
// (internal/stack/s3test.StartKMS): an implementation of the AWS KMS API
// (real AES-GCM under keys it keeps in a directory) that stands in for
// AWS KMS, which this machine cannot reach. Upstream tags no module
// version; this is the module proxy's pseudo-version of its newest commit
// (2026-02-28). Built from the module proxy like versitygw, never added to
// the project's go.mod.
const LocalKMSVersion = "v0.0.0-20260228092603-2a5e92d09ab6"

// EnvLocalKMS names the environment variable that points at an existing
// local-kms binary, skipping the pinned build.
const EnvLocalKMS = "ATELIER_LOCAL_KMS"

var localKMSTool = goTool{
	name:    "local-kms",
	exe:     "local-kms",
	dir:     "local-kms-" + LocalKMSVersion,
	pkg:     "github.com/nsmithuk/local-kms",
	version: LocalKMSVersion,
	// What upstream's Dockerfile stamps (main.Version).
	ldflags:  "-X main.Version=" + LocalKMSVersion,
	estimate: "about 1 min on 2 cores",
	env:      EnvLocalKMS,
}

// EnsureLocalKMS returns the path of a local-kms binary: $ATELIER_LOCAL_KMS
// if set (must exist), else <CacheDir>/local-kms-<LocalKMSVersion>/local-kms,
// built with `go install` on first use with progress sent to log (may be
// nil), as EnsureVersityGW.
func EnsureLocalKMS(ctx context.Context, log func(string, ...any)) (string, error) {
	return localKMSTool.ensure(ctx, log)
}
