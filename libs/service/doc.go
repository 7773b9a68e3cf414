// Package service is the one shape every coordkit service has, and the contract a new service
// or backend follows. `coord serve` opens the connections a process shares once (Deps), then
// loops over a list of services, each opened by Open(ctx, deps, cfg) into a Mounted service:
// its Connect handler, its health checks and what closes it.
//
// # The contract
//
// A service <svc> has two packages:
//
//   - services/<svc>: the service itself. NewService(Config) builds it over engines and
//     backends that are already open; its Config holds those, the metrics registerer and the
//     logger. Service.Close stops the service's own background work (sweepers, event
//     subscriptions) and never closes a backend: it did not open them.
//   - services/<svc>/<svc>service: Open(ctx, service.Deps, Config) (*service.Mounted, error),
//     the one way a process runs the service. Its Config holds the service's own settings
//     (each a flag of `coord serve`); connections come from Deps. It lives apart because it
//     imports the engines, which import the service.
//
// Whoever opens closes. Open opens the backends (service.OpenBackends over the service's
// backend list), then the service over them; Mounted.Close closes the service first, then
// the backends, last opened first (Closers). Nobody closes Deps but the process, after every
// service. An engine that has background work (a janitor, a worker-id lease) is closed by
// whoever started it.
//
// Each <svc>service exports its backend list, Backends, a []Backend: name, flag and Open. The
// list order is the default-backend preference (Preference, DefaultBackend), health checks
// come from the opened backends (BackendChecks), and the service's conformance tests run a
// row for every name in the list (a test compares the two). An engine's constructor takes a
// Config struct (New(ctx, conn, Config)), and the embedded SQLite file comes from
// Deps.OpenSQLite, which applies the process's settings (SQLiteSynchronous).
//
// # Adding a service
//
//  1. proto/coordkit/<svc>/v1: the API; `make generate` writes libs/client/gen.
//  2. services/<svc>: a module (its go.mod replacing its siblings, a line in go.work and in
//     the Makefile's MODULES) with Config, NewService, Close and the handlers, mapping
//     failures with libs/server's helpers.
//  3. services/<svc>/<svc>service: Config, Backends (in default preference) and Open:
//     OpenBackends, DefaultBackend, NewService, then a Mounted whose Close is the Closers
//     (service first, backends after).
//  4. The conformance table in services/<svc>/harness_test.go, a row per backend of the
//     list, and the test that compares the two.
//  5. cmd/coord/serve.go: the service's own flags and its entry in services(cfg).
//  6. Docs: docs/api.md, docs/configuration.md (flags), the README's services.
//
// # Adding a backend
//
//  1. services/<svc>/<engine>: the engine, New(ctx, conn, Config) implementing the
//     service's Backend; its Close stops what it started and leaves the connection it was
//     given open.
//  2. One entry in <svc>service.Backends, at its place in the default preference; its Open
//     returns the zero backend when Deps and Config do not enable it.
//  3. A row in the conformance table (backends in services/<svc>/harness_test.go), named as
//     in the list: the list test fails until it is there.
//  4. Only for a new kind of connection (Postgres, say): a Deps field, opened once in
//     openDeps (cmd/coord/serve.go) behind its flag and closed there after every service,
//     and the same in tools/bench's in-process service.
//  5. Docs: docs/backends.md and the README's backend table.
package service
