#!/usr/bin/env bash
# Builds the Kubernetes control plane that internal/stack/kubetest runs, into
#
#   ${ATELIER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/atelier}/
#     kube-<version>/{kube-apiserver,kube-controller-manager,kube-scheduler,etcd}
#     kwok-<version>/kwok
#     kuberay-<version>/ray-operator
#
# (e.g. ~/.cache/atelier/kube-v1.35.4/kube-apiserver) and prints those three
# directories on stdout, one a line; progress goes to stderr.
#
# `build.sh node` builds instead the real node's binaries (kubetest's
# RealNode), and prints their two directories:
#
#     kube-<version>/{kubelet,kube-proxy}
#     containerd-<version>/{containerd,containerd-shim-runc-v2,ctr}
#
# (runc, the CNI plugins, iptables and conntrack come from the distribution:
# `make ensure-node` installs them.)
#
# Versions are pinned by go.mod files, not here: the Kubernetes binaries by
# ./go.mod (k8s.io/kubernetes, with every staging module replaced by its
# published v0.<minor>.<patch> release because upstream's replaces point at
# local directories), etcd by ./etcd/go.mod, kwok by ./kwok/go.mod, the
# KubeRay operator by ./kuberay/go.mod and containerd by ./containerd/go.mod.
# Each has its own module so that no one moves another's dependencies (etcd
# v3.6.6 would raise the etcd client kube-apiserver was released with; kwok
# v0.7.0 is built on client-go v0.33, KubeRay v1.6.0 on v0.35.0). All are
# built from source through the Go module proxy: nothing else is downloaded,
# so this works on a fresh machine with only Go.
#
# A binary that is already present is not rebuilt. Each one is built to a
# temporary name in its target directory and renamed into place, so an
# interrupted build never leaves a half-written binary that later runs would
# trust. Concurrent runs do not corrupt anything; internal/stack/kubetest holds a
# lock around this script so parallel test binaries do not build twice.
#
# Cold build times on 2 cores (empty module and build caches; README has the
# current figures): kube-apiserver 6-11 min, then kube-controller-manager and
# kube-scheduler a few minutes more (they share most packages), etcd, kwok and
# the KubeRay operator 1-3 min each; for the node, kubelet and kube-proxy
# about 2 min after the control plane (most of their packages are its), and
# containerd about 2 min. Later runs return at once.
set -euo pipefail

what="${1:-control-plane}"
case "$what" in
control-plane | node) ;;
*)
	echo "usage: $0 [control-plane|node]" >&2
	exit 2
	;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# -mod=mod: resolve from go.mod/go.sum even if the caller's GOFLAGS says
# -mod=vendor; GOWORK=off: a go.work above the repo must not pull these
# modules into a workspace with the main module's (different) versions.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export GOWORK=off

modversion() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }
kube_version="$(modversion "$here" k8s.io/kubernetes)"
etcd_version="$(modversion "$here/etcd" go.etcd.io/etcd/server/v3)"
kwok_version="$(modversion "$here/kwok" sigs.k8s.io/kwok)"
kuberay_version="$(modversion "$here/kuberay" github.com/ray-project/kuberay/ray-operator)"
containerd_version="$(modversion "$here/containerd" github.com/containerd/containerd/v2)"
cache="${ATELIER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/atelier}"
kube_out="$cache/kube-$kube_version"
kwok_out="$cache/kwok-$kwok_version"
kuberay_out="$cache/kuberay-$kuberay_version"
containerd_out="$cache/containerd-$containerd_version"

tmps=()
trap 'rm -f "${tmps[@]}"' EXIT

# build OUTDIR NAME VERSION MODDIR PKG ESTIMATE [go build flags...]
build() {
	local out="$1" name="$2" version="$3" moddir="$4" pkg="$5" estimate="$6"
	shift 6
	local bin="$out/$name"
	if [[ -x "$bin" ]]; then
		return 0
	fi
	mkdir -p "$out"
	local tmp="$bin.tmp.$$"
	tmps+=("$tmp")
	local log="$out/$name.build.log"
	echo "building $name $version (first time, $estimate; log: $log)…" >&2
	local start=$SECONDS
	# -trimpath keeps local paths out of the binary and makes the build
	# cache entries independent of where the module cache lives.
	(cd "$moddir" && go build -trimpath -o "$tmp" "$@" "$pkg") >"$log" 2>&1 &
	local pid=$!
	# Heartbeat: a silent multi-minute step looks like a hang.
	(
		# sleep's own stdio is detached so that, once this loop is killed, a
		# leftover sleep does not hold the caller's stderr pipe open.
		while sleep 60 </dev/null >/dev/null 2>&1; do
			echo "still building $name $version ($(((SECONDS - start) / 60)) min)…" >&2
		done
	) &
	local beat=$!
	local rc=0
	wait "$pid" || rc=$?
	kill "$beat" 2>/dev/null || true
	wait "$beat" 2>/dev/null || true
	if [[ $rc -ne 0 ]]; then
		rm -f "$tmp"
		echo "building $name $version failed (exit $rc); last lines of $log:" >&2
		tail -n 40 "$log" >&2
		exit "$rc"
	fi
	mv -f "$tmp" "$bin"
	echo "built $name $version in $((SECONDS - start)) s: $bin" >&2
}

# Stamp the version the way release builds do, so /version reports v1.35.4
# rather than v0.0.0-master (clients log and sometimes check it).
vpkg=k8s.io/component-base/version
kube_minor="$(echo "$kube_version" | cut -d. -f2)"
kube_ldflags="-s -w -X $vpkg.gitVersion=$kube_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$kube_minor -X $vpkg.gitTreeState=clean"
if [[ $what == node ]]; then
	build "$kube_out" kubelet "$kube_version" "$here" k8s.io/kubernetes/cmd/kubelet "~2-7 min, less after kube-apiserver" \
		-ldflags "$kube_ldflags"
	build "$kube_out" kube-proxy "$kube_version" "$here" k8s.io/kubernetes/cmd/kube-proxy "<1 min after kubelet" \
		-ldflags "$kube_ldflags"
	# No cgo (so no C toolchain or libraries) and no btrfs, devmapper or zfs
	# snapshotters, which need them; overlayfs and native remain.
	ctrd_tags="no_btrfs no_devmapper no_zfs urfave_cli_no_docs"
	export CGO_ENABLED=0
	for name in containerd containerd-shim-runc-v2 ctr; do
		build "$containerd_out" "$name" "$containerd_version" "$here/containerd" \
			"github.com/containerd/containerd/v2/cmd/$name" "~2 min for the first, seconds for the others" \
			-tags "$ctrd_tags" -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version"
	done
	printf '%s\n' "$kube_out" "$containerd_out"
	exit 0
fi

build "$kube_out" kube-apiserver "$kube_version" "$here" k8s.io/kubernetes/cmd/kube-apiserver "~6-11 min on 2 cores" \
	-ldflags "$kube_ldflags"
build "$kube_out" kube-controller-manager "$kube_version" "$here" k8s.io/kubernetes/cmd/kube-controller-manager "~2-5 min after kube-apiserver" \
	-ldflags "$kube_ldflags"
build "$kube_out" kube-scheduler "$kube_version" "$here" k8s.io/kubernetes/cmd/kube-scheduler "~1-2 min after kube-apiserver" \
	-ldflags "$kube_ldflags"
build "$kube_out" etcd "$etcd_version" "$here/etcd" go.etcd.io/etcd/server/v3 "~1 min" \
	-ldflags "-s -w"
build "$kwok_out" kwok "$kwok_version" "$here/kwok" sigs.k8s.io/kwok/cmd/kwok "~2-4 min" \
	-ldflags "-s -w"
build "$kuberay_out" ray-operator "$kuberay_version" "$here/kuberay" github.com/ray-project/kuberay/ray-operator "~2-4 min" \
	-ldflags "-s -w"

printf '%s\n' "$kube_out" "$kwok_out" "$kuberay_out"
