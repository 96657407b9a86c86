// Package s3test gives a test a real S3 server: versitygw (see
// devstack.EnsureVersityGW) serving a temporary directory on loopback,
// with one bucket, stopped when the test ends.
//
//	s := s3test.Start(t)
//	s.Setenv(t) // credentials for the in-process AWS SDK
//	b, err := blob.OpenBucket(ctx, s.URL("runs/"))
//
// Why a real server rather than gocloud.dev's fileblob or memblob: the
// code under test talks S3 through the AWS SDK (request signing, path-style
// addressing, presigned URLs, checksums), and only a server that speaks the
// protocol checks that. Why versitygw: it is one Go binary built from the
// module proxy (the only registry this project can rely on), Apache-2.0,
// and its posix backend keeps buckets as plain directories, so a test can
// also look at what was written (Server.Dir). Every Start runs its own
// server on a free port: it starts in well under a second, and tests then
// share neither objects nor state.
//
// Run is the same server outside a test (bench/artifacts): it returns a
// stop function instead of registering a cleanup.
//
// StartKMS is the same for AWS KMS: local-kms (devstack.EnsureLocalKMS),
// an implementation of the KMS API with real AES, seeded with one key, for
// the awskms:// keys of internal/platform/secretbox.
//
// With -short, Start skips the calling test, so `go test -short ./...`
// never builds versitygw. `make test` builds it first (make ensure-s3), so
// the first-time build (a few minutes) is not hidden in a test's output.
package s3test
