//go:build tools

// Package tools pins the etcd server that internal/stack/kubetest runs beside
// kube-apiserver; build.sh builds its main package (go.etcd.io/etcd/server/v3).
//
// etcd lives in its own module, not in ../go.mod, so that etcd v3.6.6 does not
// raise the etcd client libraries kube-apiserver v1.35.4 was released with.
package tools

import _ "go.etcd.io/etcd/server/v3"
