#!/usr/bin/env bash
# Benchmarks, run by `make bench`: the programs under bench/ with their
# default sizes (what each measures: bench/doc.go; figures:
# docs/benchmarks.md). Reports go to stdout, progress to stderr.
# BENCH_ARGS is passed to every program, e.g. `make bench BENCH_ARGS=-quick`.
# bench/listruns needs only Postgres (it loads 1,000,000 runs: a few
# minutes on 2 cores, ~1.5 GB of database, dropped at the end).
# bench/artifacts needs only versitygw (make ensure-s3) and ~5 GiB free
# under $TMPDIR (1 GiB file, its two stored copies and two downloads),
# removed at the end; ~10 minutes at its defaults.
#
# Not run here: the raw Temporal round trip on the tuned dev server,
#   go test -run '^$' -bench ActivityRoundTrip ./internal/stack/temporaltest
set -euo pipefail
cd "$(dirname "$0")/.."
for prog in bench/*/main.go; do
  dir="./$(dirname "$prog")"
  echo "== $dir" >&2
  # shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
  go run "$dir" ${BENCH_ARGS:-}
done
