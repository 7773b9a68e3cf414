# The two commands a newcomer needs: `make run` and `make test`. Everything else is here for
# the people changing coordkit.

MODULES := libs/client libs services/lock services/idgen services/taskpick cmd/coord e2e tools/bench
PKGS    := github.com/coordkit/coordkit/...
# go test starts the packages in the order given, TEST_P at a time: the longest ones
# (services/lock, mostly waiting on leases; services/taskpick, its scale test; e2e) start
# first and the short ones fill in beside them, instead of a long one starting last in the
# alphabetical order and finishing alone. Three at once, not GOMAXPROCS (2 here): the long
# packages mostly wait, and with two a core sat idle a third of the run.
TEST_PKGS := $(addprefix github.com/coordkit/coordkit/,services/lock services/taskpick e2e) $(PKGS)
TEST_P    := 3

# buf is the prebuilt binary from the npm registry, its version and integrity pinned by
# tools/buf/package-lock.json (`make buf` installs it; no node needed to run it). The plugins
# it runs stay `go tool` (proto/buf.gen.yaml), hence GOWORK=off. Where tools/buf pins no
# binary (only Linux x86-64 and arm64 are there) or npm is missing, buf is built with go.
BUF_VERSION := $(shell sed -n 's/.*"@bufbuild\/buf-linux-x64": *"\([^"]*\)".*/\1/p' tools/buf/package.json)
BUF_PKG     := $(shell case "$$(uname -s)/$$(uname -m)" in (Linux/x86_64) echo buf-linux-x64;; (Linux/aarch64|Linux/arm64) echo buf-linux-aarch64;; esac)
ifneq ($(BUF_PKG),)
ifneq ($(shell command -v npm)$(wildcard tools/buf/node_modules/@bufbuild/$(BUF_PKG)/bin/buf),)
BUF_BIN     := $(CURDIR)/tools/buf/node_modules/@bufbuild/$(BUF_PKG)/bin/buf
endif
endif
ifdef BUF_BIN
BUF         := GOWORK=off $(BUF_BIN)
else
BUF         := GOWORK=off go run github.com/bufbuild/buf/cmd/buf@v$(BUF_VERSION)
endif

.PHONY: run build wait-ready test backends buf lint generate check-generated vet standalone bench bench-lock bench-id bench-contend bench-task

## run: build bin/coord, then start coordkit with the embedded defaults (SQLite in ./coordkit-data) on ADDR, nothing to install
ADDR ?= 127.0.0.1:8080
run: build
	bin/coord serve --addr $(ADDR) $(ARGS)

## build: compile bin/coord (the first build downloads and compiles the dependencies: a minute or two)
build:
	@echo "building bin/coord (the first build takes a minute or two)..." >&2
	go build -o bin/coord ./cmd/coord

## wait-ready: wait until the server at ADDR (default 127.0.0.1:8080) answers /readyz, up to 5 minutes (a first build)
wait-ready:
	@echo "waiting for http://$(ADDR)/readyz ..." >&2; \
	for i in $$(seq 600); do \
		if curl -fsS -o /dev/null "http://$(ADDR)/readyz" 2>/dev/null; then echo "ready: http://$(ADDR)" >&2; exit 0; fi; \
		sleep 0.5; \
	done; \
	echo "not ready after 5 minutes: see the output of make run" >&2; curl -sS "http://$(ADDR)/readyz" >&2; exit 1

## test: start the real dev backends, then lint, check generated code, vet and run every test with -race
# Data race reports go to GORACE log files (not inline) and are printed at the very end, so
# that a failure's cause is in the last lines of a long log; a race that only a child process
# logged (its test passed) fails the run with status 66. Our log_path comes last in GORACE so
# it wins over one the caller set (the check would silently see nothing otherwise).
test: backends lint check-generated vet standalone
	@races=$$(mktemp -d) || exit 1; trap 'rm -rf "$$races"' EXIT; \
	echo "GORACE=\"$$GORACE log_path=$$races/race\" go test -race -count=1 -p $(TEST_P) -timeout 30m $(TEST_PKGS)"; \
	GORACE="$$GORACE log_path=$$races/race" go test -race -count=1 -p $(TEST_P) -timeout 30m $(TEST_PKGS); status=$$?; \
	for f in "$$races"/race.*; do \
		[ -s "$$f" ] || continue; echo "=== data race report ($$f) ==="; head -c 30000 "$$f"; \
		[ $$status -ne 0 ] || status=66; \
	done; \
	exit $$status

## backends: make sure the real backends the tests use are running (installs them with apt if missing)
backends:
	deploy/dev/backends.sh up

## buf: install the pinned prebuilt buf into tools/buf from the npm registry (nothing to do when it is there)
buf:
ifdef BUF_BIN
	@if [ "$$($(BUF_BIN) --version 2>/dev/null)" != "$(BUF_VERSION)" ]; then \
		echo "installing buf $(BUF_VERSION) ($(BUF_PKG)) from the npm registry into tools/buf" >&2; \
		npm ci --prefix tools/buf --no-audit --no-fund --ignore-scripts --loglevel=error && \
		test "$$($(BUF_BIN) --version)" = "$(BUF_VERSION)"; \
	fi
else
	@echo "no prebuilt buf for $$(uname -s)/$$(uname -m) in tools/buf, or no npm: building buf $(BUF_VERSION) with go instead (minutes the first time)" >&2
endif

lint: buf
	cd proto && $(BUF) lint

## generate: regenerate libs/client/gen (the SDK module's generated code) after changing a .proto file
generate: buf
	cd proto && $(BUF) generate

## check-generated: fail when libs/client/gen differs from what the .proto files generate
# buf.gen.yaml writes to ../libs/client/gen, so under --output "$$tmp/proto" it lands in $$tmp/libs/client/gen.
check-generated: buf
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	(cd proto && $(BUF) generate --output "$$tmp/proto") && \
	if ! diff -r "$$tmp/libs/client/gen" libs/client/gen >/dev/null; then \
		diff -r "$$tmp/libs/client/gen" libs/client/gen | head -40; \
		echo "libs/client/gen is stale: run 'make generate' and commit the result" >&2; exit 1; \
	fi

vet:
	go vet $(PKGS)
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed: $$out" >&2; exit 1; fi

## standalone: every module builds on its own (GOWORK=off), as a Docker build would, and the SDK module needs nothing of the server's
# libs/client is what `go get` hands a user: it may require no other coordkit module (a user
# cannot fetch their placeholder versions), no replace (a user's build ignores it) and no server
# dependency (NATS, SQL drivers, Redis, Prometheus).
SDK_FORBIDDEN := github.com/coordkit/|nats|sqlite|mysql|redis|prometheus|zookeeper
standalone:
	@for m in $(MODULES); do (cd $$m && GOWORK=off go build ./...) || exit 1; done
	@deps=$$(cd libs/client && GOWORK=off go list -m -f '{{if not .Main}}{{.Path}}{{with .Replace}} => {{.Path}}{{end}}{{end}}' all) || exit 1; \
	bad=$$(echo "$$deps" | grep -E '$(SDK_FORBIDDEN)| => '); \
	if [ -n "$$bad" ]; then echo "the SDK module (libs/client) must not depend on:" $$bad >&2; exit 1; fi

## bench: coordbench (tools/bench, its own module): every benchmark below with its peers, shorter runs (about 4 minutes), into docs/benchmarks.md with the machine, commit and date
bench: backends
	go run ./tools/bench all --report docs/benchmarks.md

## bench-lock: the lock benchmark, every backend, against go-redsync on the dev Redis nodes
bench-lock: backends
	go run ./tools/bench lock

## bench-id: the ID benchmark against bwmarrin/snowflake and google/uuid
bench-id: backends
	go run ./tools/bench id

## bench-contend: one hot key, 16 clients over 2 service instances, every backend, against go-redsync
bench-contend: backends
	go run ./tools/bench contend

## bench-task: the task-pick benchmark, every backend, against hibiken/asynq on the dev Redis (db 15, flushed)
bench-task: backends
	go run ./tools/bench task
