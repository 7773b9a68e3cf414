// Package lockservice opens the lock service with its backends on a process's shared
// connections: the one entry `coord serve` mounts. It lives apart from package lock because
// the backends it opens (sqllock, redislock, redlock, zklock) import lock.
package lockservice

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1/lockv1connect"
	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/redislock"
	"github.com/coordkit/coordkit/services/lock/redlock"
	"github.com/coordkit/coordkit/services/lock/sqllock"
	"github.com/coordkit/coordkit/services/lock/zklock"
)

// Config is the lock service's own configuration; the connections it shares with the
// process's other services come in service.Deps.
type Config struct {
	// RedlockAddrs are independent Redis nodes (3 or 5) for the redlock backend; empty
	// enables none.
	RedlockAddrs []string
	// ZooKeeperAddrs is the ZooKeeper ensemble of the zookeeper backend; empty enables none.
	ZooKeeperAddrs []string
	// Scope namespaces this deployment's locks in the shared MySQL and PostgreSQL
	// databases; default sqllock.DefaultScope.
	Scope string
	// Default is the backend of requests that name none; default the first enabled of
	// Backends.
	Default string
	// WaitAttempts is lock.Config.WaitAttempts.
	WaitAttempts int
}

// Backends are the lock backends, in default-backend preference: redis on Deps.Redis,
// redlock and zookeeper on their own connections to Config's addresses, mysql on
// Deps.MySQL, postgres on Deps.Postgres, and sqlite, always, in the file locks.db in Deps.DataDir. Each is enabled by
// what its Flag provides.
var Backends = []service.Backend[lock.Backend, Config]{
	{Name: "redis", Flag: "--redis-url", Open: func(_ context.Context, deps service.Deps, _ Config) (lock.Backend, func() error, error) {
		rdb := deps.RedisClient()
		if rdb == nil {
			return nil, nil, nil
		}
		b := redislock.New(redisconf.Pipelined(rdb), redislock.Config{})
		return b, b.Close, nil
	}},
	{Name: "redlock", Flag: "--redlock-addrs", Open: func(ctx context.Context, _ service.Deps, cfg Config) (lock.Backend, func() error, error) {
		if len(cfg.RedlockAddrs) == 0 {
			return nil, nil, nil
		}
		b, err := redlock.Open(ctx, cfg.RedlockAddrs, redlock.Config{})
		if err != nil {
			return nil, nil, err
		}
		return b, b.Close, nil
	}},
	{Name: "zookeeper", Flag: "--zk-addrs", Open: func(ctx context.Context, deps service.Deps, cfg Config) (lock.Backend, func() error, error) {
		if len(cfg.ZooKeeperAddrs) == 0 {
			return nil, nil, nil
		}
		b, err := zklock.Open(ctx, cfg.ZooKeeperAddrs, zklock.Config{Logger: deps.Log()})
		if err != nil {
			return nil, nil, err
		}
		return b, b.Close, nil
	}},
	{Name: "mysql", Flag: "--mysql-dsn", Open: func(ctx context.Context, deps service.Deps, cfg Config) (lock.Backend, func() error, error) {
		if deps.MySQL == nil {
			return nil, nil, nil
		}
		b, err := sqllock.New(ctx, deps.MySQL, sqllock.Config{Scope: cfg.Scope, Logger: deps.Log()})
		if err != nil {
			return nil, nil, err
		}
		return b, b.Close, nil
	}},
	{Name: "postgres", Flag: "--postgres-url", Open: func(ctx context.Context, deps service.Deps, cfg Config) (lock.Backend, func() error, error) {
		if deps.Postgres == nil {
			return nil, nil, nil
		}
		b, err := sqllock.New(ctx, deps.Postgres, sqllock.Config{Scope: cfg.Scope, Logger: deps.Log()})
		if err != nil {
			return nil, nil, err
		}
		return b, b.Close, nil
	}},
	{Name: "sqlite", Flag: "--data-dir", Open: func(ctx context.Context, deps service.Deps, _ Config) (lock.Backend, func() error, error) {
		db, err := deps.OpenSQLite(ctx, "locks.db")
		if err != nil {
			return nil, nil, err
		}
		b, err := sqllock.New(ctx, db, sqllock.Config{Logger: deps.Log()})
		if err != nil {
			return nil, nil, errors.Join(err, db.Close())
		}
		return b, func() error { return errors.Join(b.Close(), db.Close()) }, nil
	}},
}

// Open opens the enabled Backends and the service over them; lock events go to
// Deps.Events. The Mounted service's Close closes the service (its event subscriptions and
// background calls), then the backends, last opened first; never Deps.
func Open(ctx context.Context, deps service.Deps, cfg Config) (*service.Mounted, error) {
	var closers service.Closers
	backends, err := service.OpenBackends(ctx, deps, cfg, Backends, &closers)
	if err != nil {
		return nil, closers.Fail(err)
	}
	def, err := service.DefaultBackend(backends, cfg.Default, service.Preference(Backends)...)
	if err != nil {
		return nil, closers.Fail(fmt.Errorf("--default-backend: %w", err))
	}
	svc, err := lock.NewService(lock.Config{
		Backends: backends, Default: def, Registerer: deps.Registerer, Logger: deps.Log(),
		WaitAttempts: cfg.WaitAttempts, Events: deps.Events,
	})
	if err != nil {
		return nil, closers.Fail(fmt.Errorf("--default-backend: %w", err))
	}
	closers.Add(svc.Close) // stops the subscriptions and background calls before the backends close
	path, h := lockv1connect.NewLockServiceHandler(svc, deps.HandlerOptions...)
	return &service.Mounted{
		Path: path, Handler: h, Close: closers.Close,
		Summary: []any{"lock_backends", strings.Join(slices.Sorted(maps.Keys(backends)), ","), "default", def},
		Checks: service.BackendChecks(backends, func(ctx context.Context, b lock.Backend) error {
			_, err := b.Inspect(ctx, healthKey)
			return err
		}),
	}, nil
}

// healthKey is the lock that health checks inspect: a read of a key nobody holds goes to
// the backend (a Redis script, a SQL SELECT, a ZooKeeper read, a Redlock quorum) and changes
// nothing.
const healthKey = "coordkit:health"
