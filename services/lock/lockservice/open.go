// Package lockservice opens the lock service with its backends on a process's shared
// connections: the one entry `coord serve` mounts. It lives apart from package lock because
// the backends it opens (sqllock, redislock, redlock, zklock) import lock.
package lockservice

import (
	"context"
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

// OpenConfig is the lock service's own configuration; the connections it shares with the
// process's other services come in service.Deps.
type OpenConfig struct {
	// RedlockAddrs are independent Redis nodes (3 or 5) for the redlock backend; empty
	// enables none.
	RedlockAddrs []string
	// ZooKeeperAddrs is the ZooKeeper ensemble of the zookeeper backend; empty enables none.
	ZooKeeperAddrs []string
	// Scope namespaces this deployment's locks in the shared MySQL database; default
	// sqllock.DefaultScope.
	Scope string
	// Default is the backend of requests that name none; default the first enabled of
	// redis, redlock, zookeeper and mysql, else sqlite.
	Default string
	// WaitAttempts is lock.Config.WaitAttempts.
	WaitAttempts int
}

// Open opens the lock backends and the service over them: sqlite always, in the file
// locks.db in Deps.DataDir; redis on Deps.Redis and mysql on Deps.MySQL when set; redlock
// and zookeeper on their own connections to cfg's addresses. Lock events go to Deps.Events.
// The Mounted service's Close closes the service and its backends, never Deps.
func Open(ctx context.Context, deps service.Deps, cfg OpenConfig) (*service.Mounted, error) {
	log := deps.Log()
	var closers service.Closers
	backends := map[string]lock.Backend{}

	db, err := deps.OpenSQLite(ctx, "locks.db")
	if err != nil {
		return nil, closers.Fail(err)
	}
	closers.Add(db.Close)
	sq, err := sqllock.New(ctx, db, sqllock.Config{Logger: log})
	if err != nil {
		return nil, closers.Fail(err)
	}
	closers.Add(sq.Close)
	backends["sqlite"] = sq

	if rdb := deps.RedisClient(); rdb != nil {
		backends["redis"] = redislock.New(redisconf.Pipelined(rdb), redislock.Config{})
	}
	if len(cfg.RedlockAddrs) > 0 {
		b, err := redlock.Open(ctx, cfg.RedlockAddrs, redlock.Config{})
		if err != nil {
			return nil, closers.Fail(fmt.Errorf("--redlock-addrs: %w", err))
		}
		closers.Add(b.Close)
		backends["redlock"] = b
	}
	if len(cfg.ZooKeeperAddrs) > 0 {
		b, err := zklock.Open(ctx, cfg.ZooKeeperAddrs, zklock.Config{Logger: log})
		if err != nil {
			return nil, closers.Fail(fmt.Errorf("--zk-addrs: %w", err))
		}
		closers.Add(b.Close)
		backends["zookeeper"] = b
	}
	if deps.MySQL != nil {
		b, err := sqllock.New(ctx, deps.MySQL, sqllock.Config{Scope: cfg.Scope, Logger: log})
		if err != nil {
			return nil, closers.Fail(fmt.Errorf("--mysql-dsn: %w", err))
		}
		closers.Add(b.Close)
		backends["mysql"] = b
	}
	def, err := service.DefaultBackend(backends, cfg.Default, "redis", "redlock", "zookeeper", "mysql", "sqlite")
	if err != nil {
		return nil, closers.Fail(fmt.Errorf("--default-backend: %w", err))
	}

	svc, err := lock.NewService(lock.Config{
		Backends: backends, Default: def, Registerer: deps.Registerer, Logger: log,
		WaitAttempts: cfg.WaitAttempts, Events: deps.Events,
	})
	if err != nil {
		return nil, closers.Fail(fmt.Errorf("--default-backend: %w", err))
	}
	path, h := lockv1connect.NewLockServiceHandler(svc, deps.HandlerOptions...)
	return &service.Mounted{
		Path: path, Handler: h,
		// The service stops its event subscriptions and closes every backend.
		Close:   svc.Close,
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
