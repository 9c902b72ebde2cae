# drainer: `make demo` runs the daemon against a throwaway Postgres and a mock
# provider; `make test` runs every test. Both install what they need.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN := bin/drainer
GOBIN_DIR := $(shell $(GO) env GOPATH)/bin
export PATH := $(GOBIN_DIR):$(PATH)

STRIPE_MOCK_VERSION := v0.203.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# APT_GET: one Debian install at a time. Installs of this project's other makes
# (a second clone, make demo beside make test) wait on a lock file, and apt's own
# locks (an install of something else) are waited for, up to ten minutes.
APT_GET := flock $${TMPDIR:-/tmp}/drainer-apt.lock $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600

.PHONY: all build demo demo-gateway test lint tools stripe-mock promtool python-deps node-deps mcp-everything gateway-ts console-browser console-screenshots chaos fuzz bench clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/drainer

# The demos say what they wait for before the build, which is silent and
# takes minutes the first time (the module cache and the compiler's cache fill).
BUILD_NOTE := @echo "building drainer (the first build takes a few minutes)…"

## demo: drain sample intents (throwaway Postgres + built-in mock provider)
demo:
	$(BUILD_NOTE)
	@$(MAKE) --no-print-directory build
	./$(BIN) demo

## demo-gateway: the MCP gateway: a call cut mid-call and re-sent twice, one effect upstream
demo-gateway:
	$(BUILD_NOTE)
	@$(MAKE) --no-print-directory build
	./$(BIN) demo --gateway

## test: vet, unit, integration and end-to-end tests, alert-rule tests
# The timeout catches a hang, not slowness: on a loaded 2-core machine the
# integration package alone has taken 25 minutes.
# go test starts the packages in the order given: the integration package,
# the longest by far, and then the next longest start first, so that the
# rest fills the other slot beside them rather than the integration
# package running alone at the end.
TEST_FIRST := ./integration/ ./drainer/ ./internal/fleet/ ./store/ ./internal/console/ ./cmd/drainer/
# Within a package, four tests at a time (-parallel; the default is one per
# core): most of them wait on processes, timers and the database, and two
# at a time left the cores half idle (on 2 cores the six longest packages
# took 5m32s at 2, 4m38s at 4, 5m09s at 8).
TEST_PARALLEL := 4

# vet builds with -race, as the tests do, so that the test build reuses its
# compiled packages (no file of the module depends on the race tag): on a
# cold cache vet then the race build took 183 + 243 s, with -race 178 + 165.
test: tools
	$(GO) vet -race -tags integration ./...
	$(GO) test -race -count=1 -timeout 75m -parallel $(TEST_PARALLEL) -tags integration $(TEST_FIRST) ./...
	@if ls dashboards/*_test.yaml >/dev/null 2>&1; then \
		promtool check rules dashboards/*rules*.yaml && promtool test rules dashboards/*_test.yaml; fi

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet -tags integration ./...

tools: stripe-mock promtool python-deps node-deps mcp-everything console-browser gateway-ts

# python-deps: what sdk/python needs, from Debian (no PyPI on the build machines);
# SQLAlchemy with its psycopg2 and asyncpg drivers (and greenlet) for its tests.
python-deps:
	@/usr/bin/python3 -c 'import psycopg, setuptools, wheel, pip, ensurepip, sqlalchemy, psycopg2, asyncpg, greenlet' 2>/dev/null || { $(APT_GET) update -qq && \
		$(APT_GET) install -y -qq --no-install-recommends \
		python3-psycopg python3-pip python3-setuptools python3-wheel python3-venv \
		python3-sqlalchemy python3-psycopg2 python3-asyncpg python3-greenlet >/dev/null; }

# node-deps: sdk/typescript's locked devDependencies (its tests' tsc and pg); its
# dist/ is committed (`npm run build` there after changing src/).
node-deps:
	@if [ -f sdk/typescript/package-lock.json ]; then cd sdk/typescript && \
		npm ci --no-audit --no-fund --loglevel=error; fi

# mcp-everything: the MCP reference server (npm @modelcontextprotocol/server-everything,
# locked) the integration tests restart under the daemon.
mcp-everything:
	cd integration/testdata/mcp-everything && npm ci --no-audit --no-fund --loglevel=error

# gateway-ts: the official TypeScript MCP SDK (npm @modelcontextprotocol/sdk, locked),
# the agent of integration/gateway_test.go's TypeScript client test.
gateway-ts:
	cd integration/testdata/gateway-ts && npm ci --no-audit --no-fund --loglevel=error

# console-browser: Debian's chromium and the locked npm playwright-core that drive the
# operator console in integration/console_browser_test.go.
console-browser:
	@command -v /usr/bin/chromium >/dev/null || { $(APT_GET) update -qq && \
		$(APT_GET) install -y -qq chromium >/dev/null; }
	cd integration/testdata/console-browser && npm ci --no-audit --no-fund --loglevel=error

# console-screenshots: the console's screenshots in docs/console/, from the browser test.
console-screenshots: console-browser
	DRAINER_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console $(GO) test -count=1 -tags integration -run '^TestConsoleInBrowser$$' ./integration/

# stripe-mock: the Stripe API double the stripe adapter's tests run against.
stripe-mock:
	@command -v stripe-mock >/dev/null || $(GO) install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION)

# promtool: Prometheus rule checks and unit tests (Debian's prometheus package).
promtool:
	@command -v promtool >/dev/null || { $(APT_GET) update -qq && \
		$(APT_GET) install -y -qq --no-install-recommends prometheus >/dev/null; }

## chaos: the full chaos suite (real processes, faults, invariant checks); make test runs its short version
chaos: tools
	set -o pipefail; DRAINER_CHAOS=full $(GO) test -count=1 -timeout 170m -tags integration -run '^TestChaos' -v ./integration/ 2>&1 | tee chaos.log

## fuzz: every fuzz target for a bounded time each (FUZZTIME, default 20s)
fuzz:
	FUZZTIME=$${FUZZTIME:-20s} ./scripts/fuzz.sh

## schema: write migrations/schema.sql (every table's current definition) from a freshly migrated database
.PHONY: schema
schema:
	$(GO) test ./migrations -run TestSchemaFileEqualsTheDatabase -update

## bench: throughput and latency figures (drainer bench --quick)
bench: build
	./$(BIN) bench --quick

clean:
	rm -rf bin
