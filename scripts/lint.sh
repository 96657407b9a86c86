#!/usr/bin/env bash
# Lint, run by `make lint` and CI: gofmt, go vet, and Temporal's static
# determinism check over workflow code. Fails on the first failing step.
set -euo pipefail
cd "$(dirname "$0")/.."

# workflowcheck is a module of its own (no dependency on our SDK version; it
# analyses source with our Go toolchain). v0.6.0 is the newest release in the
# module proxy and works with Go 1.26; older ones (v0.3.0) pin an x/tools too
# old for it. `go run pkg@version` caches the build, so only the first run
# compiles it (~10 s).
WORKFLOWCHECK_VERSION=v0.6.0

echo "lint: gofmt"
# find, not git ls-files: new untracked files must be checked too.
mapfile -t files < <(find . -name '*.go' -not -path './.git/*' -not -path './bin/*' \
  -not -path '*/testdata/*' -not -path './.atelier/*')
unformatted="$(gofmt -l "${files[@]}")"
if [ -n "$unformatted" ]; then
  echo "gofmt would change (run gofmt -w on them):" >&2
  echo "$unformatted" >&2
  exit 1
fi

echo "lint: go vet"
go vet ./...

# Reports every registered workflow whose call graph reaches map iteration,
# time.Now, goroutines, channels, global rand, ... Known false positives are
# whitelisted in scripts/workflowcheck.config.yaml; one call can be exempted
# with a `//workflowcheck:ignore` comment on or above it.
echo "lint: workflowcheck $WORKFLOWCHECK_VERSION"
go run "go.temporal.io/sdk/contrib/tools/workflowcheck@$WORKFLOWCHECK_VERSION" \
  -config scripts/workflowcheck.config.yaml ./...
echo "lint: ok"
