//go:build tools

// Package tools pins the KubeRay operator that internal/stack/kubetest runs;
// build.sh builds its main package (github.com/ray-project/kuberay/ray-operator).
//
// Its own module, so the operator builds with exactly the dependency versions
// its release was tested with.
package tools

import _ "github.com/ray-project/kuberay/ray-operator"
