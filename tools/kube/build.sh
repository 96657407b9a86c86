#!/usr/bin/env bash
# Builds the kube-apiserver and etcd that internal/kubetest runs, into
#
#   ${ATELIER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/atelier}/kube-<version>/
#
# (e.g. ~/.cache/atelier/kube-v1.35.4/{kube-apiserver,etcd}) and prints that
# directory on stdout; progress goes to stderr.
#
# Versions are pinned by go.mod files, not here: kube-apiserver by ./go.mod
# (k8s.io/kubernetes, with every staging module replaced by its published
# v0.<minor>.<patch> release because upstream's replaces point at local
# directories), etcd by ./etcd/go.mod (its own module, so it cannot move the
# etcd client libraries kube-apiserver was released with). Both are built from
# source through the Go module proxy: nothing else is downloaded, so this works
# on a fresh machine with only Go.
#
# A binary that is already present is not rebuilt. Each one is built to a
# temporary name in the target directory and renamed into place, so an
# interrupted build never leaves a half-written binary that later runs would
# trust. Concurrent runs do not corrupt anything; internal/kubetest holds a
# lock around this script so parallel test binaries do not build twice.
#
# The first kube-apiserver build takes 6-11 min on 2 cores (it compiles most of
# Kubernetes; measured 5.75 min from an empty module and build cache); etcd
# then takes under a minute. Later runs return at once.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# -mod=mod: resolve from go.mod/go.sum even if the caller's GOFLAGS says
# -mod=vendor; GOWORK=off: a go.work above the repo must not pull these
# modules into a workspace with the main module's (different) versions.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export GOWORK=off

kube_version="$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
etcd_version="$(cd "$here/etcd" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
cache="${ATELIER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/atelier}"
out="$cache/kube-$kube_version"
mkdir -p "$out"

# build NAME VERSION MODDIR PKG ESTIMATE [go build flags...]
build() {
	local name="$1" version="$2" moddir="$3" pkg="$4" estimate="$5"
	shift 5
	local bin="$out/$name"
	if [[ -x "$bin" ]]; then
		return 0
	fi
	local tmp="$bin.tmp.$$"
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

trap 'rm -f "$out"/*.tmp.$$' EXIT

# Stamp the version the way release builds do, so /version reports v1.35.4
# rather than v0.0.0-master (clients log and sometimes check it).
vpkg=k8s.io/component-base/version
kube_minor="$(echo "$kube_version" | cut -d. -f2)"
build kube-apiserver "$kube_version" "$here" k8s.io/kubernetes/cmd/kube-apiserver "~6-11 min on 2 cores" \
	-ldflags "-s -w -X $vpkg.gitVersion=$kube_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$kube_minor -X $vpkg.gitTreeState=clean"
build etcd "$etcd_version" "$here/etcd" go.etcd.io/etcd/server/v3 "~1 min" \
	-ldflags "-s -w"

echo "$out"
