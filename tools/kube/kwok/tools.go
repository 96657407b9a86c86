//go:build tools

// Package tools pins kwok, the controller that plays kubelet for the fake
// nodes internal/stack/kubetest creates; build.sh builds its main package
// (sigs.k8s.io/kwok/cmd/kwok).
//
// kwok lives in its own module so that its Kubernetes libraries (v0.33) do not
// move those of kube-apiserver in ../go.mod, or the reverse.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
