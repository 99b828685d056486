# jetrun — run `make` for the list of targets.

GO          ?= go
BIN         := bin
GOTESTFLAGS ?=

# make run settings; any JETRUN_* variable in the environment also applies.
export JETRUN_CHILDREN  ?= demo
export JETRUN_DEMO_RUNS ?= 5

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build parent-worker, child-worker and the jetrun CLI into bin/
	@echo "building $(BIN)/parent-worker, $(BIN)/child-worker and $(BIN)/jetrun (the first build compiles every dependency: about a minute)"
	$(GO) build -o $(BIN)/ ./cmd/...

# Ctrl-C reaches make, this shell and parent-worker (one process group). The
# shell outlives it: it waits for parent-worker to exit (passing a SIGTERM
# sent to make on), and exit codes 130 and 143 (a second Ctrl-C or SIGTERM
# stopped it at once) end make quietly, as 0 does; any other is an error.
.PHONY: run
run: build ## run parent-worker on an embedded nats-server with an in-process demo pool and a demo fan-out
	@./$(BIN)/parent-worker & pid=$$!; \
	trap 'again=1' INT; trap 'again=1; kill -TERM $$pid 2>/dev/null' TERM; \
	while again=; wait $$pid; code=$$?; [ -n "$$again" ]; do :; done; \
	case $$code in 0|130|143) ;; *) exit $$code ;; esac

# The stock nats CLI of the README's tour, pinned, built from the Go module
# proxy in its own module: its go.sum vouches for its dependencies, and the
# checksum database has no entry for the module itself (GONOSUMDB). The
# tests build it the same way.
NATSCLI_VERSION := v0.2.0

.PHONY: nats
nats: ## build the stock nats CLI (v0.2.0, the tour's) into bin/, as the tests build it
	@dir=$$(GONOSUMDB=github.com/nats-io/natscli GOFLAGS=-mod=mod $(GO) mod download -json github.com/nats-io/natscli@$(NATSCLI_VERSION) | \
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p') && test -n "$$dir" && \
	cd "$$dir" && GONOSUMDB=github.com/nats-io/natscli GOFLAGS=-mod=mod $(GO) build -o $(abspath $(BIN))/nats ./nats
	@echo "built $(abspath $(BIN))/nats $(NATSCLI_VERSION); put it on your PATH: export PATH=\"$(abspath $(BIN)):\$$PATH\""

.PHONY: nats-server
nats-server: ## build nats-server (the version go.mod pins, as the tests build it) into bin/, for nats.conf and nats-cluster/
	$(GO) build -o $(BIN)/ github.com/nats-io/nats-server/v2
	@echo "built $(abspath $(BIN))/nats-server $$($(GO) list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)"

# An MCP host launches `jetrun mcp` by its absolute path (it has neither
# this directory nor bin/ on its PATH) and reaches make run's embedded
# server through the data directory's nats-url file, whatever its port;
# with JETRUN_NATS_URL set, the entry names that server instead.
.PHONY: mcp-config
mcp-config: ## print an MCP host's config entry for `jetrun mcp` (stdio), with bin/jetrun's absolute path (built first)
	@$(GO) build -o $(BIN)/ ./cmd/jetrun
	@printf '{"mcpServers": {\n  "jetrun-stdio": {"command": "%s", "args": ["mcp"], "env": {%s}}\n}}\n' \
		"$(abspath $(BIN))/jetrun" \
		'$(if $(JETRUN_NATS_URL),"JETRUN_NATS_URL": "$(JETRUN_NATS_URL)","JETRUN_DATA_DIR": "$(abspath $(or $(JETRUN_DATA_DIR),data))")'

# CI runs make test, so make lint is part of it: what lint reports fails CI.
.PHONY: test
test: chromium deps lint ## make lint, then every test with -race (real nats-servers, real processes, headless Chromium)
	$(GO) test -race -count=1 -timeout 15m $(GOTESTFLAGS) ./...

.PHONY: test-short
test-short: chromium deps ## the fast tier: every test with -short, which skips the in-process three-node cluster tests
	$(GO) test -short -count=1 $(GOTESTFLAGS) ./...

# The browser test needs Debian's chromium; install it when missing and we
# can. Without it the browser test fails (it never skips).
.PHONY: chromium
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			echo "installing chromium for the browser test"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1; then \
			echo "installing chromium for the browser test"; \
			sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else \
			echo "chromium is missing and cannot be installed here: the browser test will fail"; \
		fi; }

# apt_install installs Debian packages when apt-get can run (as root or with
# sudo); otherwise it says what is missing, and the tests needing it fail.
define apt_install
	if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "installing $(1)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null; \
	elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1; then \
		echo "installing $(1)"; \
		sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null; \
	else \
		echo "$(1) missing and cannot be installed here: the cross-language tests will fail"; \
	fi
endef

.PHONY: deps
deps: ## install what the cross-language tests need: python3 (with venv, setuptools and Debian's wheel file, to pip install sdk/python; mypy), node, npm, and the packages of sdk/js and examples/js (npm ci)
	@command -v python3 >/dev/null 2>&1 || { $(call apt_install,python3); }
	@python3 -c 'import ensurepip, venv, setuptools' >/dev/null 2>&1 || { $(call apt_install,python3-venv python3-setuptools); }
	@ls /usr/share/python-wheels/wheel-*.whl >/dev/null 2>&1 || { $(call apt_install,python3-wheel-whl); }
	@command -v mypy >/dev/null 2>&1 || { $(call apt_install,mypy); }
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { $(call apt_install,nodejs npm); }
	@for d in sdk/js examples/js; do \
		if [ ! -f $$d/node_modules/.package-lock.json ] || [ $$d/package-lock.json -nt $$d/node_modules/.package-lock.json ]; then \
			echo "npm ci in $$d"; \
			(cd $$d && npm ci --no-audit --no-fund --loglevel=error) || exit 1; \
		fi; \
	done

# Without -race: on two cores the race detector slows 400 callers below the
# limit, and the test checks that the fleet uses the limit to within 5 %.
.PHONY: test-limits
test-limits: ## provider limits at scale: 8 workers × 50 runs (limiters, Go handlers, Python exec children), two tenants at 10:1, against a fake provider
	$(GO) test -count=1 -timeout 10m -run '^TestFleet' -v ./internal/engine/limits/ -limits.full
	$(GO) test -count=1 -timeout 10m -run '^TestLimitFleet$$' -v ./pkg/worker/ -limits.full
	$(GO) test -count=1 -timeout 10m -run '^TestPythonChildrenShareALimit$$' -v ./internal/app/agents/execagent/ -limits.full

.PHONY: test-cluster
test-cluster: ## on the nats-cluster/ three-node cluster: kill -9 nodes under 300 runs, restarts per node kill at 3 s and 15 s leases, the role attacks, a short nemesis (prints the figures)
	$(GO) test -race -count=1 -tags cluster -timeout 30m -run '^TestCluster' -v ./internal/testkit/e2e/

# The nemesis alone, long: NEMESIS_DURATION of random faults under load
# (NEMESIS_SEED=N replays the schedule a run printed as "nemesis seed=N";
# NEMESIS_TIMEOUT must exceed the duration by ten minutes or more).
NEMESIS_DURATION ?= 30m
NEMESIS_SEED     ?= 0
NEMESIS_TIMEOUT  ?= 2h
.PHONY: test-nemesis
test-nemesis: ## random faults on the three-node cluster under load for NEMESIS_DURATION (30m); NEMESIS_SEED=N replays a schedule
	$(GO) test -race -count=1 -tags cluster -timeout $(NEMESIS_TIMEOUT) -run '^TestClusterNemesis$$' -v ./internal/testkit/e2e/ \
		-nemesis.duration=$(NEMESIS_DURATION) -nemesis.seed=$(NEMESIS_SEED)

.PHONY: bench
bench: ## measure jetrun against raw JetStream in one run (prints ratios)
	$(GO) test -run '^$$' -bench '^BenchmarkWorkload' -benchtime 1x -timeout 20m ./internal/testkit/bench/
	$(GO) test -run '^$$' -bench '^BenchmarkScale' -benchtime 1x -timeout 20m ./internal/testkit/bench/
	$(GO) test -run '^$$' -bench '^BenchmarkLeaseRenewal' -timeout 20m ./internal/testkit/bench/
	$(GO) test -run '^$$' -bench '^BenchmarkLimitReservations' -benchtime 3x -timeout 20m ./internal/engine/limits/

.PHONY: fuzz
fuzz: ## fuzz the decoders (dispatch, child event lines), id validation and run transitions for 30s each
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeDispatch$$' -fuzztime 30s ./pkg/events/
	$(GO) test -run '^$$' -fuzz '^FuzzValidateID$$' -fuzztime 30s ./pkg/events/
	$(GO) test -run '^$$' -fuzz '^FuzzRunID$$' -fuzztime 30s ./pkg/parent/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 30s ./internal/app/agents/eventline/
	$(GO) test -run '^$$' -fuzz '^FuzzApply$$' -fuzztime 30s ./internal/engine/model/

# staticcheck, pinned: installed from the Go module proxy into bin/tools/
# on first use (a new version installs next to the old one).
STATICCHECK_VERSION := v0.8.2
STATICCHECK         := $(BIN)/tools/staticcheck-$(STATICCHECK_VERSION)/staticcheck

$(STATICCHECK):
	GOBIN=$(abspath $(dir $(STATICCHECK))) GOFLAGS= $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# Every package with its tests, the cluster-tagged ones (make test-cluster's)
# included.
.PHONY: lint
lint: $(STATICCHECK) ## go vet, gofmt and staticcheck (pinned; installed into bin/tools/ on first use) over every package and test
	$(GO) vet -tags cluster ./...
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(STATICCHECK) -tests -tags cluster ./...

.PHONY: tidy-check
tidy-check: ## fail if go.mod or go.sum are not tidy
	$(GO) mod tidy -diff

.PHONY: clean
clean: ## remove build output, test artifacts and the embedded server's data
	rm -rf $(BIN) data artifacts
