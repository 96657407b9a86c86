# Atelier developer entry points (`make help` lists them). The two that
# matter: `make dev` runs Atelier on this machine, `make test` proves it works.
#
# Go may be installed but not on PATH (fresh machines, CI shells): the
# standard install location is appended, so a Go earlier on PATH still wins.
export PATH := $(PATH):/usr/local/go/bin
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

GO ?= go
# Integration tests run real Temporal dev servers, Postgres and worker
# processes; on 2 shared cores a full run takes minutes, not seconds.
TEST_TIMEOUT ?= 30m

.DEFAULT_GOAL := help
.PHONY: help build dev ensure-temporal ensure-kube ensure-helm test test-short lint vet bench generate clean

help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

build: ## build bin/atelier
	$(GO) build -o bin/atelier ./cmd/atelier

dev: ## run Atelier locally: Temporal dev server + UI, Postgres, gateway, worker
	$(GO) run ./cmd/atelier dev

# Builds the pinned temporal CLI on first use (~10 min on 2 cores) with live
# progress. Run before `go test` because go test buffers each package's
# output: the same build inside a test binary would look like a hang.
ensure-temporal: ## build (once) / locate the pinned temporal CLI
	@$(GO) run ./internal/devstack/cmd/ensure-temporal >/dev/null

# Builds the pinned Kubernetes control plane on first use (kube-apiserver,
# controller-manager, scheduler, etcd, kwok, KubeRay operator: ~15-20 min on
# 2 cores from empty caches) for the Kubernetes tests (internal/kubetest), for
# the same reason.
ensure-kube: ## build (once) / locate the Kubernetes control plane for the tests
	@tools/kube/build.sh >/dev/null

# Builds the pinned helm (devstack.HelmVersion) on first use for the chart
# test (deploy/helm), for the same reason; helm is not in go.mod.
ensure-helm: ## build (once) / locate the pinned helm for the chart test
	@$(GO) run ./internal/devstack/cmd/ensure-helm >/dev/null

test: ensure-temporal ensure-kube ensure-helm vet ## go vet, unit and integration tests (real Temporal, Postgres, kube-apiserver)
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./...

test-short: ## unit tests only (-short skips what needs a Temporal dev server)
	$(GO) test -short ./...

lint: ## gofmt check, go vet, workflowcheck (scripts/lint.sh)
	@scripts/lint.sh

vet: ## go vet
	$(GO) vet ./...

bench: ensure-temporal ensure-kube ## benchmark programs under bench/ (scripts/bench.sh, docs/benchmarks.md)
	@scripts/bench.sh

generate: ## regenerate code: oapi-codegen, wire (go:generate), sqlc (scripts/generate.sh)
	@scripts/generate.sh

clean: ## remove build output
	rm -rf bin
