//go:build tools

// Package tools pins the Kubernetes binaries that internal/kubetest runs;
// build.sh builds them from this module.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
