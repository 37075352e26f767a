# usher: the two commands a newcomer needs are `make demo` and `make test`.
# Everything they need is installed here, into caches outside the repo.

SHELL := /bin/bash
PYTHON ?= python3
USHER_CACHE ?= $(HOME)/.cache/usher
VENV ?= $(USHER_CACHE)/venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-16)
PYTEST_ARGS ?=

export USHER_CACHE

.PHONY: help venv binaries tools image node-binaries real-node-e2e kind-e2e lint unit e2e test demo controlplane clean-cache manifests

help:
	@echo "make demo    local control plane + kwok nodes + usher scheduling sample pods"
	@echo "make test    install everything, lint, type-check, unit + e2e tests"
	@echo "make unit    fast tests of the pure core (no cluster)"
	@echo "make lint    ruff, mypy --strict, import-linter"
	@echo "make controlplane   a local control plane until Ctrl-C (prints KUBECONFIG)"
	@echo "make conformance    Kubernetes' sig-scheduling e2e specs, kube-scheduler vs usher (README: Conformance)"
	@echo "make dra-conformance  Kubernetes' DRA e2e specs on kwok nodes and a real node, both schedulers; README tables"
	@echo "make image   usher's image built here without a registry (podman, Debian bases from debootstrap)"
	@echo "make real-node-e2e  helm install on a real node (kubelet + containerd) next to the kwok nodes"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP)

binaries:
	bash e2e/build-binaries.sh

# Debian's packages the tests need: prometheus for promtool, which checks the chart's rules (the
# tests' Prometheus server is built by e2e/build-binaries.sh, with Kubernetes discovery); podman, buildah, runc and debootstrap to build and run usher's image without a registry
# (make image); iproute2 and iptables for the real node's network namespace (make real-node-e2e).
TOOLS_COMMANDS := promtool podman buildah runc debootstrap ip iptables
TOOLS_PACKAGES := prometheus podman buildah runc debootstrap iproute2 iptables

tools:
	@(for c in $(TOOLS_COMMANDS); do command -v $$c >/dev/null || exit 1; done) || { \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends $(TOOLS_PACKAGES); }

# The real node's kubelet, containerd (with its runc shim) and CNI plugins (e2e/node), from the Go
# module proxy into the same cache: cold about 8 min on 2 cores, warm seconds.
node-binaries:
	bash e2e/build-binaries.sh node

# `helm install` for real: the chart's pods on a real node (e2e/test_real_node.py, about a minute),
# and the image run with the chart's pod spec (e2e/test_image.py). Both are also part of `make test`.
real-node-e2e: venv binaries node-binaries tools image
	$(BIN)/pytest e2e/test_image.py e2e/test_real_node.py $(PYTEST_ARGS)

# usher's image, built here from Debian root filesystems (debootstrap), no registry (e2e/image/build.sh;
# README "Install"), and the real node's pause image. Cold about 4 min, warm seconds.
image: tools
	bash e2e/image/build.sh usher pause dra

lint: venv
	$(BIN)/ruff check operator tests e2e bench conftest.py
	$(BIN)/ruff format --check operator tests e2e bench conftest.py
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: venv
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

e2e: venv binaries node-binaries tools image
	$(BIN)/pytest e2e $(PYTEST_ARGS)

test: venv binaries node-binaries tools image lint
	$(BIN)/pytest $(PYTEST_ARGS)

demo: venv binaries
	$(BIN)/python -m e2e.demo

controlplane: venv binaries
	$(BIN)/python -m e2e.controlplane up

# The e2e suite on a kind cluster (needs Docker; CI here has none): see e2e/kind.sh.
kind-e2e: venv
	bash e2e/kind.sh $(PYTEST_ARGS)

manifests: binaries
	$(USHER_CACHE)/bin/$$(sed -n 's/^HELM_VERSION=//p' e2e/versions.env)/helm template usher charts/usher \
		--namespace usher-system > manifests/install.yaml

clean-cache:
	rm -rf $(USHER_CACHE)

# Benchmarks (bench/README.md): `make bench` runs the hand-written workloads and scheduler_perf's up to 500
# nodes and 2500 pods (under 45 minutes on 2 cores: bench/README.md), `make bench-large` the larger ones; each rewrites
# RESULTS.md from every result there is. `python -m bench.runner --list-upstream --tier standard` estimates.
.PHONY: bench bench-large bench-smoke

bench: venv binaries
	$(BIN)/python -m bench.runner --tier standard --report

bench-large: venv binaries
	$(BIN)/python -m bench.runner --suite upstream --tier large --report

bench-smoke: venv binaries
	$(BIN)/pytest bench/test_smoke.py $(PYTEST_ARGS)

# Kubernetes' own sig-scheduling e2e specs against kube-scheduler and usher, side by side
# (README "Conformance"); CONFORMANCE_ARGS="--scheduler usher" for usher alone.
.PHONY: conformance
CONFORMANCE_ARGS ?= --scheduler both

conformance: venv binaries
	bash e2e/build-binaries.sh e2e-test
	$(BIN)/python -m e2e.conformance.run $(CONFORMANCE_ARGS)

# Kubernetes' own DRA e2e specs (test/e2e/dra) against kube-scheduler and usher: the ones that need no kubelet
# on kwok nodes, the ones that do on one real node (about 45 minutes; the two schedulers run side by side, each
# on its own harness, as the kubelet specs mostly wait). Writes README's two DRA tables (README "Conformance: DRA").
.PHONY: dra-conformance
dra-conformance: venv binaries node-binaries tools image
	bash e2e/build-binaries.sh e2e-test
	$(BIN)/python -m e2e.conformance.run --suite dra --parallel --readme
	$(BIN)/python -m e2e.conformance.run --suite dra-kubelet --parallel --readme --timeout-minutes 120
