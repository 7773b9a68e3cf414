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
//  2. services/<svc>: a module (go.mod replacing its siblings, an entry in go.work and in the
//     Makefile's MODULES) with Config, NewService, Close, and the handlers mapping failures
//     with libs/server's helpers.
//  3. services/<svc>/<svc>service: Config, Backends (the list, in preference order), Open
//     (OpenBackends, DefaultBackend, NewService, then a Mounted whose Close is the Closers).
//  4. Conformance tests in services/<svc> whose table names every backend of Backends, and
//     the test comparing the two.
//  5. cmd/coord/serve.go: the service's flags and its entry in services(cfg), in opening order.
//  6. Docs: docs/api.md, docs/configuration.md (flags), README's table of services.
//
// # Adding a backend
//
//  1. services/<svc>/<engine>: the engine package, New(ctx, conn, Config) implementing the
//     service's Backend interface; Close releases what it started (never the connection it
//     was given).
//  2. One entry in <svc>service.Backends, at its place in the default preference, whose
//     Open returns the zero backend when Deps and Config do not enable it.
//  3. A row in the service's conformance table, named as in the list (the list test fails
//     until it is there).
//  4. Only for a new kind of connection (Postgres, say): a Deps field, opened once in
//     cmd/coord/serve.go's openDeps behind its flag, and closed there after every service.
//  5. Docs: docs/backends.md and the README's backend table; tools/bench takes the backend
//     by name where it benchmarks a service's backends.
package service
