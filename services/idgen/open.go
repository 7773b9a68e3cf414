package idgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/idgen/redisincr"
	"github.com/coordkit/coordkit/services/idgen/segment"
	"github.com/coordkit/coordkit/services/idgen/snowflake"
	"github.com/coordkit/coordkit/services/idgen/workerid"
)

// Worker-lease stores for StoreConfig.WorkerLeases.
const (
	// LeasesSQL keeps worker-id leases in the SQL store (SQLite or MySQL): the default.
	LeasesSQL = "sql"
	// LeasesRedis keeps worker-id leases in Redis.
	LeasesRedis = "redis"
)

// mysqlConns is the pool of a MySQL store OpenService opens itself. It is small:
// reservations are rare (one per segment, one lease renewal every few seconds) and short.
const mysqlConns = 8

// OpenConfig is the ID service's own configuration; the connections it shares with the
// process's other services come in service.Deps.
type OpenConfig struct {
	// WorkerLeases is LeasesSQL (default) or LeasesRedis, which needs Deps.Redis.
	WorkerLeases string
}

// Open opens the ID service on the process's shared connections: segment tags and
// worker-id leases on Deps.MySQL when set, else in the SQLite file idgen.db in Deps.DataDir;
// MODE_REDIS_INCR (and LeasesRedis) on Deps.Redis when set. The Mounted service's Close
// releases the worker id and closes what Open opened, never Deps: close Redis after it, so
// that a lease held there can be released.
func Open(ctx context.Context, deps service.Deps, cfg OpenConfig) (*service.Mounted, error) {
	scfg := StoreConfig{
		DB:           deps.MySQL,
		Redis:        deps.RedisClient(),
		WorkerLeases: cfg.WorkerLeases,
		Registerer:   deps.Registerer,
		Logger:       deps.Log(),
	}
	switch cfg.WorkerLeases {
	case "", LeasesSQL:
	case LeasesRedis:
		if scfg.Redis == nil {
			return nil, errors.New("idgen: --id-worker-leases redis needs --redis-url (or --redis-addr)")
		}
	default:
		return nil, fmt.Errorf("idgen: --id-worker-leases %q: want %q or %q", cfg.WorkerLeases, LeasesSQL, LeasesRedis)
	}
	var closers service.Closers
	if scfg.DB == nil {
		db, err := deps.OpenSQLite(ctx, "idgen.db")
		if err != nil {
			return nil, err
		}
		closers.Add(db.Close)
		scfg.DB = db
	}
	svc, engines, err := openService(ctx, scfg)
	if err != nil {
		return nil, closers.Fail(err)
	}
	closers.Add(svc.Close)
	store, leases := "sqlite", cfg.WorkerLeases
	if deps.MySQL != nil {
		store = deps.MySQL.Dialect.Name
	}
	if leases == "" {
		leases = LeasesSQL
	}
	path, h := idgenv1connect.NewIdServiceHandler(svc, deps.HandlerOptions...)
	return &service.Mounted{
		Path: path, Handler: h, Close: closers.Close,
		Summary: []any{"id_store", store, "worker_leases", leases, "redis_incr", scfg.Redis != nil},
		Checks:  checks(store, engines, scfg.Redis),
	}, nil
}

// checks are the ID service's health checks: its SQL store answers (segments, and worker
// leases on it), the snowflake worker id is leased (without it MODE_SNOWFLAKE fails), and
// Redis answers when MODE_REDIS_INCR is on.
func checks(store string, e opened, rdb redis.UniversalClient) map[string]server.Check {
	out := map[string]server.Check{
		store: func(ctx context.Context) error { return e.db.PingContext(ctx) },
		"snowflake": func(context.Context) error {
			if _, held := e.gen.Worker(); !held {
				return errors.New("idgen: no snowflake worker id leased")
			}
			return nil
		},
	}
	if rdb != nil {
		out["redis"] = func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	}
	return out
}

// StoreConfig says where the engines keep their state. The zero value of every field but
// SQLitePath (or DB) means its default; with only SQLitePath set every mode but
// MODE_REDIS_INCR works and nothing needs installing.
type StoreConfig struct {
	// DB is a SQL database the caller shares with other services, holding segment tags and
	// worker-id leases. The service uses it and never closes it; when it is set SQLitePath
	// and MySQLDSN are ignored.
	DB *sqldb.DB
	// SQLitePath is the embedded SQLite file holding segment tags and worker-id leases, used
	// when DB is nil and MySQLDSN empty. Instances sharing it must run on one machine.
	SQLitePath string
	// MySQLDSN puts segment tags and worker-id leases on MySQL/MariaDB instead (go-sql-driver
	// DSN), for instances on several machines; used when DB is nil.
	MySQLDSN string
	// Redis enables MODE_REDIS_INCR (and LeasesRedis). The caller keeps ownership.
	Redis redis.UniversalClient
	// RedisPrefix starts every Redis key; default "coordkit:idgen:".
	RedisPrefix string
	// RedisBlock is how many IDs one INCRBY reserves; default redisincr.DefaultBlock.
	RedisBlock int64
	// WorkerLeases is LeasesSQL (default) or LeasesRedis.
	WorkerLeases string
	// LeaseTTL is the worker-id lease length; default snowflake.DefaultLeaseTTL.
	LeaseTTL time.Duration
	// WorkerID fixes the snowflake worker id without a lease. For tests only: two instances
	// with one id issue duplicates.
	WorkerID *int
	// Clock is the time snowflake IDs carry and segment steps adapt to; default time.Now.
	// For tests.
	Clock func() time.Time
	// Registerer receives the ID metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
	// Logger logs lease changes and failed background reservations; default slog.Default().
	Logger *slog.Logger
}

// OpenService opens the stores cfg names, starts the engines (leasing a snowflake worker id)
// and returns the service. Close the service to release the worker id and close the stores
// it opened.
func OpenService(ctx context.Context, cfg StoreConfig) (*Service, error) {
	s, _, err := openService(ctx, cfg)
	return s, err
}

// opened is what the health checks of a service OpenService opened look at.
type opened struct {
	db  *sqldb.DB
	gen *snowflake.Generator
}

// openService is OpenService, also returning what the health checks need.
func openService(ctx context.Context, cfg StoreConfig) (*Service, opened, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var closers service.Closers
	fail := func(err error) (*Service, opened, error) { return nil, opened{}, closers.Fail(err) }

	db := cfg.DB
	if db == nil {
		var err error
		switch {
		case cfg.MySQLDSN != "":
			db, err = sqldb.OpenMySQL(ctx, cfg.MySQLDSN, mysqlConns)
		case cfg.SQLitePath != "":
			db, err = sqldb.OpenSQLite(ctx, cfg.SQLitePath)
		default:
			err = errors.New("idgen: no SQL store: set DB, SQLitePath or MySQLDSN")
		}
		if err != nil {
			return fail(err)
		}
		closers.Add(db.Close)
	}
	segStore, err := segment.NewStore(ctx, db)
	if err != nil {
		return fail(err)
	}
	segments := segment.New(segStore, segment.Config{Clock: cfg.Clock, Logger: cfg.Logger})
	closers.Add(segments.Close)

	var leases workerid.Store
	switch cfg.WorkerLeases {
	case "", LeasesSQL:
		if leases, err = workerid.NewSQL(ctx, db); err != nil {
			return fail(err)
		}
	case LeasesRedis:
		if cfg.Redis == nil {
			return fail(errors.New("idgen: worker leases on redis need a Redis client"))
		}
		leases = workerid.NewRedis(cfg.Redis, cfg.RedisPrefix)
	default:
		return fail(fmt.Errorf("idgen: worker leases %q: want %q or %q", cfg.WorkerLeases, LeasesSQL, LeasesRedis))
	}
	gen, err := snowflake.Start(ctx, snowflake.Config{
		Store: leases, WorkerID: cfg.WorkerID, LeaseTTL: cfg.LeaseTTL, Clock: cfg.Clock, Logger: cfg.Logger,
	})
	if err != nil {
		return fail(err)
	}
	closers.Add(gen.Close)

	scfg := Config{Snowflake: gen, Segments: segments, Clock: cfg.Clock, Registerer: cfg.Registerer, Logger: cfg.Logger}
	if cfg.Redis != nil {
		incr := redisincr.New(cfg.Redis, redisincr.Config{Prefix: cfg.RedisPrefix, Block: cfg.RedisBlock, Logger: cfg.Logger})
		closers.Add(incr.Close)
		scfg.RedisIncr = incr
	}
	s := NewService(scfg)
	// The service closes what OpenService opened, in reverse: engines, then the lease, then
	// the DB it opened itself.
	s.closers = closers
	return s, opened{db: db, gen: gen}, nil
}
