//go:build tools

// Package tools pins containerd, the container runtime of the real node that
// internal/stack/kubetest starts (RealNode); build.sh builds its three main
// packages: containerd, containerd-shim-runc-v2 (one per pod sandbox; found
// on PATH) and ctr (imports the tests' images).
//
// containerd lives in its own module so that its libraries (gRPC, OTel,
// containerd's own API) do not move those of the Kubernetes binaries in
// ../go.mod, or the reverse. It is built with CGO_ENABLED=0 and without the
// btrfs, devmapper and zfs snapshotters (overlayfs and native remain), so it
// needs no C toolchain or libraries; runc, which needs cgo and libseccomp,
// comes from the distribution.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
