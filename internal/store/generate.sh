#!/usr/bin/env bash
# Regenerates internal/store/db from migrations/ and queries/ with sqlc.
#
# sqlc is pinned in tools/sqlc/go.mod (a separate module, so its cgo-heavy
# dependency graph stays out of the main go.mod) and built once into
# ~/.cache/atelier/sqlc-<version>/sqlc. The first build compiles libpg_query
# with cgo and takes several minutes; later runs reuse the binary.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tooldir="$root/tools/sqlc"

version="$(cd "$tooldir" && go list -m -f '{{.Version}}' github.com/sqlc-dev/sqlc)"
cache="${ATELIER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/atelier}"
bin="$cache/sqlc-$version/sqlc"

if [[ ! -x "$bin" ]]; then
	echo "building sqlc $version into $bin (cgo; takes a few minutes)" >&2
	mkdir -p "$(dirname "$bin")"
	(cd "$tooldir" && CGO_ENABLED=1 go build -o "$bin.tmp" github.com/sqlc-dev/sqlc/cmd/sqlc)
	mv "$bin.tmp" "$bin"
fi

cd "$here"
"$bin" generate
echo "generated $here/db with sqlc $version" >&2
