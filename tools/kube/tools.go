//go:build tools

// Package tools pins the Kubernetes binaries that internal/stack/kubetest runs;
// build.sh builds them from this module: the control plane (kube-apiserver,
// kube-controller-manager, kube-scheduler) and the real node's kubelet and
// kube-proxy. They share most of their packages, so after kube-apiserver the
// others mostly hit the build cache.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
