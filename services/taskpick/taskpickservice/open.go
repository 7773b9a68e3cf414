// Package taskpickservice opens the task-pick service the way `coord serve` opens every
// service: Open(ctx, deps, cfg) over the process's shared connections. It lives apart from
// package taskpick because it imports the engines, which import taskpick.
package taskpickservice

import (
	"context"
	"errors"
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

// Config holds the task service's own settings; its connections come from service.Deps.
type Config struct {
	// Default names the backend of requests that name none; empty means the first enabled of
	// Backends.
	Default string
	// Retention keeps acked tasks as done for this long; 0 deletes them at Ack.
	Retention time.Duration
	// SweepInterval is how often this instance recovers expired leases; default
	// taskpick.DefaultSweepInterval.
	SweepInterval time.Duration
	// ScheduleInterval is how often this instance fires due schedules; default
	// taskpick.DefaultScheduleInterval.
	ScheduleInterval time.Duration
	// ScheduleGrace is how late a tick may fire and still count as on time; default
	// taskpick.DefaultScheduleGrace.
	ScheduleGrace time.Duration
}

// Backends are the task backends, in default-backend preference: redis on Deps.Redis,
// mysql on Deps.MySQL, postgres on Deps.Postgres, and sqlite, always, in the file tasks.db
// in Deps.DataDir.
var Backends = []service.Backend[taskpick.Backend, Config]{
	{Name: "redis", Flag: "--redis-url", Open: func(_ context.Context, deps service.Deps, cfg Config) (taskpick.Backend, func() error, error) {
		rdb := deps.RedisClient()
		if rdb == nil {
			return nil, nil, nil
		}
		b := redistask.New(rdb, redistask.Config{Retention: cfg.Retention, Scripts: redisconf.Pipelined(rdb)})
		return b, b.Close, nil
	}},
	{Name: "mysql", Flag: "--mysql-dsn", Open: func(ctx context.Context, deps service.Deps, cfg Config) (taskpick.Backend, func() error, error) {
		if deps.MySQL == nil {
			return nil, nil, nil
		}
		b, err := sqltask.New(ctx, deps.MySQL, sqltask.Config{Retention: cfg.Retention})
		if err != nil {
			return nil, nil, err
		}
		return b, b.Close, nil
	}},
	{Name: "postgres", Flag: "--postgres-url", Open: func(ctx context.Context, deps service.Deps, cfg Config) (taskpick.Backend, func() error, error) {
		if deps.Postgres == nil {
			return nil, nil, nil
		}
		b, err := sqltask.New(ctx, deps.Postgres, sqltask.Config{Retention: cfg.Retention})
		if err != nil {
			return nil, nil, err
		}
		return b, b.Close, nil
	}},
	{Name: "sqlite", Flag: "--data-dir", Open: func(ctx context.Context, deps service.Deps, cfg Config) (taskpick.Backend, func() error, error) {
		db, err := deps.OpenSQLite(ctx, "tasks.db")
		if err != nil {
			return nil, nil, err
		}
		b, err := sqltask.New(ctx, db, sqltask.Config{Retention: cfg.Retention})
		if err != nil {
			return nil, nil, errors.Join(err, db.Close())
		}
		return b, func() error { return errors.Join(b.Close(), db.Close()) }, nil
	}},
}

// Open opens the enabled Backends and the service over them and returns it mounted. The
// Mounted service's Close stops the service (its sweepers and event subscription), then
// closes the backends, last opened first; never Deps.
func Open(ctx context.Context, deps service.Deps, cfg Config) (*service.Mounted, error) {
	var closers service.Closers
	backends, err := service.OpenBackends(ctx, deps, cfg, Backends, &closers)
	if err != nil {
		return nil, closers.Fail(err)
	}
	def, err := service.DefaultBackend(backends, cfg.Default, service.Preference(Backends)...)
	if err != nil {
		return nil, closers.Fail(fmt.Errorf("--task-default-backend: %w", err))
	}
	svc, err := taskpick.NewService(taskpick.Config{
		Backends: backends, Default: def, Events: deps.Events, SweepInterval: cfg.SweepInterval,
		ScheduleInterval: cfg.ScheduleInterval, ScheduleGrace: cfg.ScheduleGrace,
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
