# Concord make targets: thin wrappers over go commands. `make help` lists them.
SHELL := /bin/bash
GO ?= go
TOOLS := $(CURDIR)/.tools/bin
BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
# A hang guard per test binary, not a target: cluster-test alone takes about
# 10 minutes on 2 quiet cores, and a slower or busier machine must not turn
# that into a timeout panic.
TEST_TIMEOUT ?= 30m
PKGS := ./...

.PHONY: help build test test-short cluster-test chaos lint depcheck proto proto-check tools dev \
	bench bench-federation test-wan bench-etcd cluster cluster-tls cluster-stop demo demo-federation sdk-deps clean deploy-check image image-check

help: ## list targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build bin/concord
	$(GO) build -o bin/concord ./cmd/concord

test: sdk-deps ## all tests with the race detector (the CI test command)
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

test-short: ## fast unit tests only
	$(GO) test -short -count=1 $(PKGS)

cluster-test: ## multi-node tests only
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./cluster-test/...

chaos: ## long chaos and soak scenarios (not part of CI)
	$(GO) test -tags chaos -race -count=1 -timeout 60m -run 'Chaos' -v ./cluster-test/...

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

depcheck: ## fail on an import against the direction in STYLE.md
	@bash .ci/depcheck.sh

deploy-check: ## validate deploy/ (Kubernetes manifests against the API types, flags, Containerfile, dashboards)
	$(GO) test -count=1 -run 'TestDeploy' ./cmd/concord

# The image builds offline, with no Docker daemon and no base image to pull:
# the static binary is built here and put on an empty (scratch) base
# (deploy/container/build.sh, with buildah or podman).
IMAGE ?= concord:dev
image: ## build the container image concord:dev (IMAGE=...) offline with buildah or podman
	GO=$(GO) bash deploy/container/build.sh $(IMAGE)

image-check: image ## build the image, check its config and files, run it as uid 65532 and probe it (root, buildah)
	CONCORD_IMAGE=$(IMAGE) $(GO) test -count=1 -run '^TestImage$$' -v ./cmd/concord

tools: $(TOOLS)/buf $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc ## install pinned proto tools into .tools/bin

$(TOOLS)/buf:
	GOBIN=$(TOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(TOOLS)/protoc-gen-go:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(TOOLS)/protoc-gen-go-grpc:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

proto: tools ## regenerate Go code from proto/concord/v1/*.proto
	cd proto && PATH=$(TOOLS):$$PATH buf generate

proto-check: proto ## fail when committed generated code differs from a fresh generation
	@git diff --exit-code -- proto/ || (echo "generated protobuf code is stale: run make proto and commit"; exit 1)
	@test -z "$$(git ls-files --others --exclude-standard proto/)" || (echo "untracked generated files in proto/"; exit 1)

demo: build ## 3 nodes + 3 agents run a debate; the leader is killed mid-debate; results in ./out
	$(GO) run ./cluster-test/demo --bin bin/concord --out out

demo-federation: build ## dc1 + dc2 (3 nodes each) linked; a debate across them through a kill -9 in each and a link cut; results in ./out
	$(GO) run ./cluster-test/demo --federation --bin bin/concord --out out --data .data/demo-federation

dev: build ## one dev node on 127.0.0.1 (ws://127.0.0.1:7700/map)
	./bin/concord server --dev

bench: ## benchmarks, each printed beside its baseline (the federation ones included)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2s ./raftstore/... ./consensus/... ./node/... ./cluster-test/...

# The WAN benchmarks and tests put each system in a network namespace
# joined by an emulated 25 ms link (cluster-test/wannet): they need root,
# iproute2 and /dev/net/tun, and skip saying why without them.
bench-federation: ## federation benchmarks only: cross-system msgs/s, WAN request/reply p50/p99, drain after a 30 s cut (root for the WAN part)
	$(GO) test -run '^$$' -bench 'BenchmarkFederation' -benchtime 2s ./cluster-test/

test-wan: ## the WAN tests: systems of processes in network namespaces over a lossy 25 ms link (root)
	$(GO) test -race -count=1 -timeout 10m -run 'TestWAN|TestLink_|TestForwarder_|TestNamespace_' -v ./cluster-test/ ./cluster-test/wannet/

bench-etcd: ## committed writes of a 3-node Concord beside a 3-node etcd, alternating (installs etcd; not in CI)
	bash cluster-test/bench/etcd-compare.sh

# Local 3-node cluster: node N (1..3) listens on 77N0 HTTP/MAP, 77N1 gRPC,
# 77N2 Raft, 77N3 gossip (node1 = 7700..7703, node2 = 7710..7713, node3 =
# 7720..7723); data, logs and pid files under ./.data/nodeN. Every port runs
# TLS with a throwaway CA under ./.data/tls; ./.data/env points the CLI at it.
CLUSTER_NODES := 1 2 3
TLS_DIR := .data/tls
cluster: build cluster-tls ## start a local 3-node cluster in the background, TLS on (ports in README)
	@mkdir -p .data
	@test -f .data/gossip.key || (umask 077 && ./bin/concord keygen > .data/gossip.key)
	@for i in $(CLUSTER_NODES); do \
	  p=77$$(( i - 1 )); mkdir -p .data/node$$i; \
	  if [ -f .data/node$$i/pid ] && kill -0 $$(cat .data/node$$i/pid) 2>/dev/null; then echo "node$$i already running"; continue; fi; \
	  ./bin/concord server --node-id node$$i --system-id local --data-dir .data/node$$i \
	    --http-addr 127.0.0.1:$${p}0 --grpc-addr 127.0.0.1:$${p}1 --raft-addr 127.0.0.1:$${p}2 --gossip-addr 127.0.0.1:$${p}3 \
	    --join 127.0.0.1:7703,127.0.0.1:7713,127.0.0.1:7723 --bootstrap-expect 3 \
	    --tls-ca-file $(TLS_DIR)/local-ca.pem --tls-cert-file $(TLS_DIR)/local-server-node$$i.pem --tls-key-file $(TLS_DIR)/local-server-node$$i-key.pem \
	    --gossip-key-file .data/gossip.key --allow-anonymous agent,client --http-open-reads > .data/node$$i/log 2>&1 & echo $$! > .data/node$$i/pid; \
	done
	@for i in $(CLUSTER_NODES); do p=77$$(( i - 1 )); \
	  for t in $$(seq 1 100); do curl -fsS --cacert $(TLS_DIR)/local-ca.pem https://127.0.0.1:$${p}0/v1/ready >/dev/null 2>&1 && break; sleep 0.2; done; \
	  curl -fsS --cacert $(TLS_DIR)/local-ca.pem https://127.0.0.1:$${p}0/v1/ready >/dev/null 2>&1 && echo "node$$i ready: wss://127.0.0.1:$${p}0/map" || { echo "node$$i not ready, see .data/node$$i/log"; exit 1; }; \
	done
	@echo "CLI: . .data/env   (CONCORD_CA_FILE and the operator certificate)"

# cluster-tls creates the local cluster's throwaway CA, one server
# certificate per node and an operator certificate for the CLI (kept
# across restarts; make clean removes them), and .data/env for the CLI.
cluster-tls: build
	@mkdir -p $(TLS_DIR)
	@test -f $(TLS_DIR)/local-ca.pem || ./bin/concord tls ca create --system-id local --dir $(TLS_DIR) >/dev/null
	@for i in $(CLUSTER_NODES); do test -f $(TLS_DIR)/local-server-node$$i.pem || \
	  ./bin/concord tls cert create --server --system-id local --node-id node$$i --dir $(TLS_DIR) >/dev/null; done
	@test -f $(TLS_DIR)/local-client-operator.pem || ./bin/concord tls cert create --client --system-id local --name operator --dir $(TLS_DIR) >/dev/null
	@printf 'export CONCORD_CA_FILE=%s CONCORD_CERT_FILE=%s CONCORD_KEY_FILE=%s\n' \
	  "$(CURDIR)/$(TLS_DIR)/local-ca.pem" "$(CURDIR)/$(TLS_DIR)/local-client-operator.pem" "$(CURDIR)/$(TLS_DIR)/local-client-operator-key.pem" > .data/env

cluster-stop: ## stop the local cluster (data stays in ./.data)
	@for i in $(CLUSTER_NODES); do \
	  if [ -f .data/node$$i/pid ]; then kill $$(cat .data/node$$i/pid) 2>/dev/null && echo "stopped node$$i"; rm -f .data/node$$i/pid; fi; \
	done

sdk-deps: ## install the pinned MAP TypeScript SDK used by interop tests
	@if [ -f cluster-test/sdk/package-lock.json ]; then cd cluster-test/sdk && npm ci --no-audit --no-fund --silent; fi

clean: ## remove build outputs and local cluster data
	rm -rf bin .data out
