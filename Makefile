# Spillway — run `make help` for the targets.
#
# Everything is installed by the Go toolchain from the module proxy; nothing here needs root.

GO        ?= go
BUILD     := build
WASMBUILD := $(GO) run ./plugin/wasmbuild
STATICCHECK_VERSION := v0.8.2
# Test timeout for the whole suite (CI budget: well under 15 minutes on 2 cores).
TEST_TIMEOUT ?= 12m

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build build/spillway.wasm, the baseline build/noop.wasm and the hostsim test guests.
	$(WASMBUILD) -o $(BUILD)/spillway.wasm ./plugin
	$(WASMBUILD) -o $(BUILD)/noop.wasm ./plugin/noop
	$(GO) run ./hostsim/internal/buildguests

# Registry reference `make oci` pushes to (optional), e.g. OCI_PUSH=ghcr.io/OWNER/spillway:0.1.0.
OCI_PUSH ?=

.PHONY: oci
oci: build ## Pack build/spillway.wasm as an OCI image for Istio (build/oci; OCI_PUSH=REF pushes it).
	$(GO) run ./istio/cmd/wasmoci -wasm $(BUILD)/spillway.wasm -layout $(BUILD)/oci $(if $(OCI_PUSH),-push $(OCI_PUSH))

.PHONY: test
test: build ## Build, then run every test: native engine tests and wasm tests under hostsim.
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	@# The filter's path benchmarks once each: they check every request took its path.
	$(GO) test -count=1 -run '^$$' -bench Path -benchtime 1x ./plugin

.PHONY: check
check: ## Hygiene: gofmt, go mod tidy, go vet, staticcheck, and a wasip1 cross-build of the plugin.
	@out=$$(gofmt -l . ); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@# go.mod and go.sum say exactly what the code imports, whatever it imports (fix: go mod tidy).
	$(GO) mod tidy -diff
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./plugin/... ./policies
	GOOS=wasip1 GOARCH=wasm $(GO) build ./plugin/... ./policies

# Where make istio-check writes every rendering it checks.
ISTIO_CHECK_DIR := $(BUILD)/istio-check

.PHONY: istio-check
istio-check: ## Istio's own istioctl (pinned in istio/istioctl/go.mod) validates and analyzes every render istio output and istio/examples, and refuses each rendering with one of istiod's rules broken.
	rm -rf $(ISTIO_CHECK_DIR)
	$(GO) test -count=1 -run '^(TestRenderEveryPolicy|TestIstiodRulesRefused)$$' ./istio \
		-render-dir=$(abspath $(ISTIO_CHECK_DIR)) -refused-dir=$(abspath $(ISTIO_CHECK_DIR))/refused
	istio/istioctl/check $(ISTIO_CHECK_DIR)/*.yaml istio/examples/*.yaml
	istio/istioctl/check -refused $(ISTIO_CHECK_DIR)/refused/*.yaml

# The native packages: those whose tests run no wasm module (their test binary does not
# link hostsim), found from the import graph so a new package joins by itself.
NATIVE_PKGS = $(GO) list -test -f '{{.ImportPath}}{{range .Deps}} {{.}}{{end}}' ./... | \
	awk '$$1 ~ /\.test$$/ { w = 0; for (i = 2; i <= NF; i++) if ($$i == "github.com/spillwayproxy/spillway/hostsim") w = 1; \
	     if (!w) { sub(/\.test$$/, "", $$1); print $$1 } }'

.PHONY: race
race: build ## The native packages' tests under the race detector.
	pkgs=$$($(NATIVE_PKGS)) && test -n "$$pkgs" && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $$pkgs

.PHONY: bench-smoke
bench-smoke: build ## Every benchmark once (-benchtime=1x): they keep compiling and running.
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x ./...

# Benchmark time per run; -p 1 runs one test binary at a time, so no benchmark shares the
# cores with another package's (the filter's ratios against noop.wasm would pay for it).
BENCHTIME ?= 500ms

.PHONY: bench
bench: build ## Benchmarks: the filter's request paths vs noop.wasm in hostsim, hostsim, the engine's hot paths, serve under load.
	{ $(GO) test -p 1 -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count=3 ./hostsim/... ./plugin/... ./e2e/load/... 2>&1; \
	  echo $$? > $(BUILD)/bench.status; } | tee $(BUILD)/bench.txt
	@exit $$(cat $(BUILD)/bench.status)

# How long `make soak` drives the load test, and the go test timeout around it.
SOAK_DURATION ?= 3m
SOAK_TIMEOUT  ?= 30m

.PHONY: soak
soak: build ## Opt-in soak, not in make test: the load test (e2e/load) for SOAK_DURATION (default 3m), same checks.
	$(GO) test -count=1 -v -run '^TestLoad$$' -timeout $(SOAK_TIMEOUT) ./e2e/load -load.duration $(SOAK_DURATION)

.PHONY: serve
serve: build ## Run the main job: hostsim serve on the embedded demo policy (http://127.0.0.1:10000, admin :9901).
	$(GO) run ./hostsim/cmd/hostsim serve -wasm $(BUILD)/spillway.wasm -admin 127.0.0.1:9901 -cache-dir $(BUILD)/.hostsim-cache

# The Envoy binary `make envoy-check` runs (Envoy >= 1.36); nothing here has one.
ENVOY_BIN ?=

.PHONY: envoy-check
envoy-check: ## Evidence from a real Envoy (ENVOY_BIN=...): the probe's traces and their diff with hostsim, then the e2e scenarios.
	@if [ -z "$(ENVOY_BIN)" ]; then \
	  echo "envoy-check: set ENVOY_BIN=/path/to/envoy (Envoy >= 1.36): make envoy-check ENVOY_BIN=\$$(which envoy)" >&2; exit 2; fi
	@$(MAKE) --no-print-directory build
	$(GO) run ./e2e/cmd/envoycheck -envoy "$(ENVOY_BIN)" -out $(BUILD)/envoy-check
	@# The e2e scenarios in that Envoy: each passes under hostsim serve in make test.
	ENVOY_BIN="$(ENVOY_BIN)" $(GO) test -count=1 -v -run 'TestScenariosEnvoy' ./e2e > $(BUILD)/envoy-check/e2e.txt 2>&1; \
	  status=$$?; grep -E '^\s*--- (PASS|FAIL|SKIP)|^(ok|FAIL)\s' $(BUILD)/envoy-check/e2e.txt; \
	  echo "envoy-check: e2e log in $(BUILD)/envoy-check/e2e.txt"; exit $$status

.PHONY: clean
clean: ## Remove build outputs, their stamps, derived build files and hostsim's compilation cache.
	rm -rf $(BUILD)
