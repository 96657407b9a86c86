#!/usr/bin/env bash
# Regenerates generated code, run by `make generate`:
#   - go:generate directives: oapi-codegen (api/gen), wire (wire/);
#   - sqlc (internal/store/generate.sh; builds sqlc once, cgo, minutes).
# Owners of new generators add a //go:generate line next to their code, or a
# step here if it cannot be one.
set -euo pipefail
cd "$(dirname "$0")/.."
go generate ./...
bash internal/store/generate.sh
