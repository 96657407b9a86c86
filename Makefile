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
# processes; on 2 shared cores a full run takes minutes, not seconds (the
# integration package took 39 min on 2026-11-28 with other work on the
# machine; the whole of .ci/run must stay under CI's 90).
TEST_TIMEOUT ?= 60m

.DEFAULT_GOAL := help
.PHONY: help build dev ensure-temporal ensure-kube ensure-node clean-node ensure-helm ensure-s3 ensure-kms ensure-chromium test test-short lint vet bench generate ui clean

help: ## list targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

build: ## build bin/atelier and bin/atelier-launcher (static: it runs in any step image)
	$(GO) build -o bin/atelier ./cmd/atelier
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o bin/atelier-launcher ./cmd/atelier-launcher

dev: ## run Atelier locally: Temporal dev server + UI, Postgres, gateway, worker
	$(GO) run ./cmd/atelier dev

# Builds the pinned temporal CLI on first use (~10 min on 2 cores) with live
# progress. Run before `go test` because go test buffers each package's
# output: the same build inside a test binary would look like a hang.
ensure-temporal: ## build (once) / locate the pinned temporal CLI
	@$(GO) run ./internal/stack/devstack/cmd/ensure-temporal >/dev/null

# Builds the pinned Kubernetes control plane on first use (kube-apiserver,
# controller-manager, scheduler, etcd, kwok, KubeRay operator: ~15-20 min on
# 2 cores from empty caches) for the Kubernetes tests (internal/stack/kubetest), for
# the same reason.
ensure-kube: ## build (once) / locate the Kubernetes control plane for the tests
	@tools/kube/build.sh >/dev/null

# The real node of the Kubernetes tests (kubetest.RealNode: kubelet,
# containerd, runc, CNI bridge, kube-proxy; one per machine, root only).
# As root on Debian/Ubuntu, installs the packages it needs when missing
# (runc, containernetworking-plugins, iptables, conntrack, busybox-static;
# ~15 s) and builds kubelet, kube-proxy and containerd on first use
# (tools/kube/build.sh node: a few minutes after the control plane, progress
# shown). Elsewhere it says what is missing: the real node's tests then skip
# (or fail, with ATELIER_REQUIRE_NODE=1 as in CI).
NODE_PACKAGES := runc containernetworking-plugins iptables conntrack busybox-static
ensure-node: ## install (once) the real node's packages and build kubelet, kube-proxy, containerd
	@if [ "$$(id -u)" != 0 ] || [ "$$(uname -s)" != Linux ]; then \
	  echo "ensure-node: the real node needs root on Linux: its tests will skip (ATELIER_REQUIRE_NODE=1 makes them fail)" >&2; exit 0; \
	fi; \
	if command -v dpkg >/dev/null 2>&1; then \
	  missing="$$(for p in $(NODE_PACKAGES); do dpkg -s "$$p" >/dev/null 2>&1 || printf '%s ' "$$p"; done)"; \
	  if [ -n "$$missing" ]; then \
	    echo "ensure-node: installing $$missing with apt-get (first time, ~15 s)…"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y --no-install-recommends $$missing >/dev/null || { apt-get update >/dev/null && apt-get install -y --no-install-recommends $$missing >/dev/null; }; \
	  fi; \
	else \
	  echo "ensure-node: no dpkg: install runc, the CNI plugins (bridge, host-local, loopback, portmap), iptables, conntrack and a static busybox yourself" >&2; \
	fi; \
	tools/kube/build.sh node >/dev/null

# Restores the host after a real node whose test binary was killed (go
# test -timeout, SIGKILL): kills its pods' processes, unmounts, deletes its
# iptables chains, bridge and node IP, restores sysctls. The next real node
# start does the same; this is for a machine left in that state.
clean-node: ## undo what a killed test's real node left on the host (root)
	@$(GO) run ./internal/stack/kubetest/cmd/sweep-node

# Builds the pinned helm (devstack.HelmVersion) on first use for the chart
# test (deploy/helm), for the same reason; helm is not in go.mod.
ensure-helm: ## build (once) / locate the pinned helm for the chart test
	@$(GO) run ./internal/stack/devstack/cmd/ensure-helm >/dev/null

# Builds the pinned versitygw (devstack.VersityGWVersion), the S3 server of
# the tests (internal/stack/s3test), on first use (1-3 min on 2 cores), for
# the same reason; versitygw is not in go.mod.
ensure-s3: ## build (once) / locate the pinned versitygw S3 server for the tests
	@$(GO) run ./internal/stack/devstack/cmd/ensure-versitygw >/dev/null

# Builds the pinned local-kms (devstack.LocalKMSVersion), the AWS KMS of the
# secrets tests (internal/stack/s3test.StartKMS), on first use (about 1 min
# on 2 cores), for the same reason; local-kms is not in go.mod.
ensure-kms: ## build (once) / locate the pinned local-kms AWS KMS server for the tests
	@$(GO) run ./internal/stack/devstack/cmd/ensure-local-kms >/dev/null

# Installs Debian's chromium on first use for the web UI's browser test
# (integration/webui_test.go), when it is missing and we may (root with
# apt-get); otherwise says how. `make test` then requires the browser: the
# test fails instead of skipping (ATELIER_REQUIRE_BROWSER).
ensure-chromium: ## install (once) Chromium for the web UI's browser test
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || [ -n "$${ATELIER_CHROMIUM:-}" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "ensure-chromium: installing Debian's chromium with apt-get (first time, 1-3 min)…"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y --no-install-recommends chromium || { apt-get update && apt-get install -y --no-install-recommends chromium; }; \
	else \
	  echo "ensure-chromium: no chromium on PATH and cannot install it (not root, or no apt-get):" >&2; \
	  echo "  install it (Debian/Ubuntu: sudo apt-get install chromium) or set ATELIER_CHROMIUM=/path/to/chrome" >&2; \
	  exit 1; \
	fi

test: ensure-temporal ensure-kube ensure-node ensure-helm ensure-s3 ensure-kms ensure-chromium vet ## go vet, unit and integration tests (real Temporal, Postgres, kube-apiserver and a real node, S3, a KMS, Chromium)
	ATELIER_REQUIRE_BROWSER=1 $(GO) test -race -timeout $(TEST_TIMEOUT) ./...

test-short: ## unit tests only (-short skips what needs a Temporal dev server)
	$(GO) test -short ./...

lint: ## gofmt check, go vet, workflowcheck (scripts/lint.sh)
	@scripts/lint.sh

vet: ## go vet
	$(GO) vet ./...

bench: ensure-temporal ensure-kube ensure-s3 ## benchmark programs under bench/ (scripts/bench.sh, docs/benchmarks.md)
	@scripts/bench.sh

generate: ## regenerate code: oapi-codegen, wire (go:generate), sqlc (scripts/generate.sh)
	@scripts/generate.sh

# The web UI (api/ui) is built into api/ui/dist, which is committed and
# embedded in the binary: only a change to the UI needs Node (20+) and npm.
# npm ci installs exactly package-lock.json (no install scripts: esbuild's
# binary comes as an optional package); the bundle is built twice and must
# come out byte-identical.
ui: ## rebuild the web UI bundle api/ui/dist from api/ui/src (needs Node, npm)
	@cd api/ui && npm ci --ignore-scripts --no-audit --no-fund
	@cd api/ui && npm run --silent check
	@cd api/ui && node build.mjs && first="$$(sha256sum dist/*)" && node build.mjs && \
	  if [ "$$first" != "$$(sha256sum dist/*)" ]; then echo "ui: two builds differ: the build is not reproducible" >&2; exit 1; fi
	@echo "ui: api/ui/dist rebuilt (reproducibly); commit it"

clean: ## remove build output
	rm -rf bin
