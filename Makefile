# Concord make targets: thin wrappers over go commands. `make help` lists them.
SHELL := /bin/bash
GO ?= go
TOOLS := $(CURDIR)/.tools/bin
BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
TEST_TIMEOUT ?= 15m
PKGS := ./...

.PHONY: help build test test-short cluster-test chaos lint depcheck proto proto-check tools dev \
	bench cluster cluster-stop demo sdk-deps clean

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
	$(GO) test -tags chaos -count=1 -timeout 60m -run 'Chaos' -v ./cluster-test/...

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

depcheck: ## fail on an import against the direction in STYLE.md
	@bash .ci/depcheck.sh

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

dev: build ## one dev node on 127.0.0.1 (ws://127.0.0.1:7700/map)
	./bin/concord server --dev

bench: ## benchmarks, each printed beside its baseline
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2s ./raftstore/... ./consensus/... ./node/... ./cluster-test/...

sdk-deps: ## install the pinned MAP TypeScript SDK used by interop tests
	@if [ -f cluster-test/sdk/package-lock.json ]; then cd cluster-test/sdk && npm ci --no-audit --no-fund --silent; fi

clean: ## remove build outputs and local cluster data
	rm -rf bin .data out
