// Package idgenservice opens the ID service the way `coord serve` opens every service:
// Open(ctx, deps, cfg) over the process's shared connections. It lives apart from package
// idgen, which builds the service over engines already started, because it opens the stores
// and starts the engines.
package idgenservice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/idgen"
	"github.com/coordkit/coordkit/services/idgen/redisincr"
	"github.com/coordkit/coordkit/services/idgen/segment"
	"github.com/coordkit/coordkit/services/idgen/snowflake"
	"github.com/coordkit/coordkit/services/idgen/workerid"
)

// Worker-lease stores for Config.WorkerLeases.
const (
	// LeasesSQL keeps worker-id leases in the SQL store (Config.Store): the default.
	LeasesSQL = "sql"
	// LeasesRedis keeps worker-id leases in Redis.
	LeasesRedis = "redis"
)

// Config is the ID service's own configuration; the connections it shares with the
// process's other services come in service.Deps. The zero value of every field means its
// default.
type Config struct {
	// Store is where segment tags and LeasesSQL worker-id leases live: StoreAuto (default),
	// StoreSQLite, StoreMySQL (needs Deps.MySQL) or StorePostgres (needs Deps.Postgres).
	Store string
	// WorkerLeases is LeasesSQL (default) or LeasesRedis, which needs Deps.Redis.
	WorkerLeases string
	// RedisPrefix starts every Redis key; default "coordkit:idgen:".
	RedisPrefix string
	// RedisBlock is how many IDs one INCRBY reserves; default redisincr.DefaultBlock.
	RedisBlock int64
	// LeaseTTL is the worker-id lease length; default snowflake.DefaultLeaseTTL.
	LeaseTTL time.Duration
	// WorkerID fixes the snowflake worker id without a lease. For tests only: two instances
	// with one id issue duplicates.
	WorkerID *int
	// Clock is the time snowflake IDs carry and segment steps adapt to; default time.Now.
	// For tests.
	Clock func() time.Time
}

// Open opens the ID service on the process's shared connections: segment tags and
// worker-id leases in the SQL store cfg.Store chooses (by default Deps.Postgres or
// Deps.MySQL, whichever is set, else the SQLite file idgen.db in Deps.DataDir);
// MODE_REDIS_INCR (and LeasesRedis) on Deps.Redis when set. The Mounted service's Close
// closes the service, then the engines (releasing the worker id), then the SQLite file;
// never Deps: close Redis after it, so that a lease held there can be released.
func Open(ctx context.Context, deps service.Deps, cfg Config) (*service.Mounted, error) {
	o, err := open(ctx, deps, cfg)
	if err != nil {
		return nil, err
	}
	store, leases := o.db.Dialect.Name, cfg.WorkerLeases
	if leases == "" {
		leases = LeasesSQL
	}
	path, h := idgenv1connect.NewIdServiceHandler(o.svc, deps.HandlerOptions...)
	return &service.Mounted{
		Path: path, Handler: h, Close: o.closers.Close,
		Summary: []any{"id_store", store, "worker_leases", leases, "redis_incr", o.redis != nil},
		Checks:  o.checks(store),
	}, nil
}

// OpenService opens the ID service as Open does and returns it unmounted, with the
// function that closes it and what Open opened: for a process that serves it its own way
// (tests, the benchmarks).
func OpenService(ctx context.Context, deps service.Deps, cfg Config) (*idgen.Service, func() error, error) {
	o, err := open(ctx, deps, cfg)
	if err != nil {
		return nil, nil, err
	}
	return o.svc, o.closers.Close, nil
}

// opened is an opened ID service: what closes it, and what its health checks look at.
type opened struct {
	svc     *idgen.Service
	closers service.Closers
	db      *sqldb.DB
	gen     *snowflake.Generator
	redis   redis.UniversalClient
}

// open opens the SQL store, starts the engines (leasing a snowflake worker id) and builds
// the service over them; closers close them in reverse.
func open(ctx context.Context, deps service.Deps, cfg Config) (*opened, error) {
	o := &opened{redis: deps.RedisClient()}
	switch cfg.WorkerLeases {
	case "", LeasesSQL:
	case LeasesRedis:
		if o.redis == nil {
			return nil, errors.New("idgen: --id-worker-leases redis needs --redis-url (or --redis-addr)")
		}
	default:
		return nil, fmt.Errorf("idgen: --id-worker-leases %q: want %q or %q", cfg.WorkerLeases, LeasesSQL, LeasesRedis)
	}
	var err error
	if o.db, err = sqlStore(deps, cfg.Store); err != nil {
		return nil, err
	}
	log := deps.Log()
	fail := func(err error) (*opened, error) { return nil, o.closers.Fail(err) }

	if o.db == nil {
		db, err := deps.OpenSQLite(ctx, "idgen.db")
		if err != nil {
			return fail(fmt.Errorf("--data-dir: %w", err))
		}
		o.closers.Add(db.Close)
		o.db = db
	}
	segStore, err := segment.NewStore(ctx, o.db)
	if err != nil {
		return fail(err)
	}
	segments := segment.New(segStore, segment.Config{Clock: cfg.Clock, Logger: log})
	o.closers.Add(segments.Close)

	var leases workerid.Store
	if cfg.WorkerLeases == LeasesRedis {
		leases = workerid.NewRedis(o.redis, cfg.RedisPrefix)
	} else if leases, err = workerid.NewSQL(ctx, o.db); err != nil {
		return fail(err)
	}
	// The generator releases its worker id at Close, which needs the lease store open: it
	// closes before the SQLite file.
	o.gen, err = snowflake.Start(ctx, snowflake.Config{
		Store: leases, WorkerID: cfg.WorkerID, LeaseTTL: cfg.LeaseTTL, Clock: cfg.Clock, Logger: log,
	})
	if err != nil {
		return fail(err)
	}
	o.closers.Add(o.gen.Close)

	scfg := idgen.Config{Snowflake: o.gen, Segments: segments, Clock: cfg.Clock, Registerer: deps.Registerer, Logger: log}
	if o.redis != nil {
		incr := redisincr.New(o.redis, redisincr.Config{Prefix: cfg.RedisPrefix, Block: cfg.RedisBlock, Logger: log})
		o.closers.Add(incr.Close)
		scfg.RedisIncr = incr
	}
	o.svc = idgen.NewService(scfg)
	o.closers.Add(o.svc.Close)
	return o, nil
}

// checks are the ID service's health checks: its SQL store answers, under its engine's name
// (segments, and worker leases on it), the snowflake worker id is leased (without it
// MODE_SNOWFLAKE fails), and Redis answers when MODE_REDIS_INCR is on.
func (o *opened) checks(store string) map[string]server.Check {
	out := map[string]server.Check{
		store: func(ctx context.Context) error { return o.db.PingContext(ctx) },
		"snowflake": func(context.Context) error {
			if _, held := o.gen.Worker(); !held {
				return errors.New("idgen: no snowflake worker id leased")
			}
			return nil
		},
	}
	if o.redis != nil {
		rdb := o.redis
		out["redis"] = func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	}
	return out
}
