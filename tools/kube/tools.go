//go:build tools

// Package tools pins the Kubernetes binaries that internal/stack/kubetest runs;
// build.sh builds them from this module. The three share most of their
// packages, so after kube-apiserver the other two mostly hit the build cache.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
