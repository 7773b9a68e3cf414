// Package taskpickservice opens the task-pick service the way `coord serve` opens every
// service: Open(ctx, deps, cfg) over the process's shared connections. It lives apart from
// package taskpick because it imports the engines, which import taskpick.
package taskpickservice

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/redistask"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// OpenConfig holds the task service's own settings; its connections come from service.Deps.
type OpenConfig struct {
	// Default names the backend of requests that name none; empty means the first enabled of
	// redis, mysql, else sqlite.
	Default string
	// Retention keeps acked tasks as done for this long; 0 deletes them at Ack.
	Retention time.Duration
	// SweepInterval is how often this instance recovers expired leases; default
	// taskpick.DefaultSweepInterval.
	SweepInterval time.Duration
}

// Open opens the task backends on the shared connections (SQLite always, in deps.DataDir;
// Redis and MySQL when deps has them) and returns the mounted service.
func Open(ctx context.Context, deps service.Deps, cfg OpenConfig) (*service.Mounted, error) {
	var closers service.Closers
	backends := map[string]taskpick.Backend{}
	db, err := deps.OpenSQLite(ctx, "tasks.db")
	if err != nil {
		return nil, err
	}
	closers.Add(db.Close)
	sq, err := sqltask.New(ctx, db, sqltask.Config{Retention: cfg.Retention})
	if err != nil {
		return nil, closers.Fail(err)
	}
	closers.Add(sq.Close)
	backends["sqlite"] = sq
	if rdb := deps.RedisClient(); rdb != nil {
		backends["redis"] = redistask.New(rdb, redistask.Config{Retention: cfg.Retention, Scripts: redisconf.Pipelined(rdb)})
	}
	if deps.MySQL != nil {
		b, err := sqltask.New(ctx, deps.MySQL, sqltask.Config{Retention: cfg.Retention})
		if err != nil {
			return nil, closers.Fail(fmt.Errorf("--mysql-dsn: %w", err))
		}
		closers.Add(b.Close)
		backends["mysql"] = b
	}
	def, err := service.DefaultBackend(backends, cfg.Default, "redis", "mysql", "sqlite")
	if err != nil {
		return nil, closers.Fail(fmt.Errorf("--task-default-backend: %w", err))
	}
	svc, err := taskpick.NewService(taskpick.Config{
		Backends: backends, Default: def, Events: deps.Events, SweepInterval: cfg.SweepInterval,
		Registerer: deps.Registerer, Logger: deps.Log(),
	})
	if err != nil {
		return nil, closers.Fail(fmt.Errorf("--task-default-backend: %w", err))
	}
	closers.Add(svc.Close) // stops the sweepers before the backends close
	path, h := taskpickv1connect.NewTaskPickServiceHandler(svc, deps.HandlerOptions...)
	return &service.Mounted{
		Path: path, Handler: h, Close: closers.Close,
		Summary: []any{"task_backends", strings.Join(slices.Sorted(maps.Keys(backends)), ","), "default", def},
		Checks: service.BackendChecks(backends, func(ctx context.Context, b taskpick.Backend) error {
			_, err := b.Stats(ctx, healthPool)
			return err
		}),
	}, nil
}

// healthPool is the pool that health checks read the stats of: a pool nobody uses, so the
// read is a round trip to the backend that finds nothing and changes nothing.
const healthPool = "coordkit-health"
