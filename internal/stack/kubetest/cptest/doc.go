// Package cptest tests internal/stack/kubetest's control plane (controllers,
// scheduler, kwok, KubeRay and the fake Ray dashboard) against itself. It
// is a package of its own because a test binary runs one kind of kubetest
// cluster, and kubetest's own tests use the bare API server.
package cptest
