# The two commands a newcomer needs: `make run` and `make test`. Everything else is here for
# the people changing coordkit.

MODULES := proto libs services/lock services/idgen services/taskpick cmd/coord e2e
PKGS    := github.com/coordkit/coordkit/...
BUF     := GOWORK=off go tool -modfile=../tools/go.mod buf

.PHONY: run build wait-ready test backends lint generate check-generated vet standalone bench-lock bench-id bench-contend bench-task

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
test: backends lint check-generated vet standalone
	go test -race -count=1 -timeout 10m $(PKGS)

## backends: make sure the real backends the tests use are running (installs them with apt if missing)
backends:
	deploy/dev/backends.sh up

lint:
	cd proto && $(BUF) lint

## generate: regenerate proto/gen after changing a .proto file
generate:
	cd proto && $(BUF) generate

## check-generated: fail when proto/gen differs from what the .proto files generate
check-generated:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	(cd proto && $(BUF) generate --output "$$tmp") && \
	if ! diff -r "$$tmp/gen" proto/gen >/dev/null; then \
		diff -r "$$tmp/gen" proto/gen | head -40; \
		echo "proto/gen is stale: run 'make generate' and commit the result" >&2; exit 1; \
	fi

vet:
	go vet $(PKGS)
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed: $$out" >&2; exit 1; fi

## standalone: every module builds on its own (GOWORK=off), as a Docker build would
standalone:
	@for m in $(MODULES); do (cd $$m && GOWORK=off go build ./...) || exit 1; done

## bench-lock: the lock benchmark, every backend, against go-redsync on the dev Redis nodes
bench-lock: backends
	go run ./cmd/coord bench lock

## bench-id: the ID benchmark against bwmarrin/snowflake and google/uuid
bench-id: backends
	go run ./cmd/coord bench id

## bench-contend: one hot key, 16 clients over 2 service instances, every backend, against go-redsync
bench-contend: backends
	go run ./cmd/coord bench contend

## bench-task: the task-pick benchmark, every backend, against hibiken/asynq on the dev Redis (db 15, flushed)
bench-task: backends
	go run ./cmd/coord bench task
