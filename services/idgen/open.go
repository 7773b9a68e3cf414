package idgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/services/idgen/redisincr"
	"github.com/coordkit/coordkit/services/idgen/segment"
	"github.com/coordkit/coordkit/services/idgen/snowflake"
	"github.com/coordkit/coordkit/services/idgen/sqldb"
	"github.com/coordkit/coordkit/services/idgen/workerid"
)

// Worker-lease stores for StoreConfig.WorkerLeases.
const (
	// LeasesSQL keeps worker-id leases in the SQL store (SQLite or MySQL): the default.
	LeasesSQL = "sql"
	// LeasesRedis keeps worker-id leases in Redis.
	LeasesRedis = "redis"
)

// StoreConfig says where the engines keep their state. The zero value of every field but
// SQLitePath means its default; with only SQLitePath set every mode but MODE_REDIS_INCR works
// and nothing needs installing.
type StoreConfig struct {
	// SQLitePath is the embedded SQLite file holding segment tags and worker-id leases, used
	// when MySQLDSN is empty. Instances sharing it must run on one machine.
	SQLitePath string
	// MySQLDSN puts segment tags and worker-id leases on MySQL/MariaDB instead (go-sql-driver
	// DSN), for instances on several machines.
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

// Open opens the stores cfg names, starts the engines (leasing a snowflake worker id) and
// returns the service. Close the service to release the worker id and close the stores.
func Open(ctx context.Context, cfg StoreConfig) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var closers []func() error
	fail := func(err error) (*Service, error) {
		for i := len(closers) - 1; i >= 0; i-- {
			err = errors.Join(err, closers[i]())
		}
		return nil, err
	}

	var db *sqldb.DB
	var err error
	switch {
	case cfg.MySQLDSN != "":
		db, err = sqldb.OpenMySQL(ctx, cfg.MySQLDSN)
	case cfg.SQLitePath != "":
		db, err = sqldb.OpenSQLite(ctx, cfg.SQLitePath)
	default:
		err = errors.New("idgen: no SQL store: set SQLitePath or MySQLDSN")
	}
	if err != nil {
		return fail(err)
	}
	closers = append(closers, db.Close)
	segStore, err := segment.NewStore(ctx, db)
	if err != nil {
		return fail(err)
	}
	segments := segment.New(segStore, segment.Config{Clock: cfg.Clock, Logger: cfg.Logger})
	closers = append(closers, segments.Close)

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
	closers = append(closers, gen.Close)

	scfg := Config{Snowflake: gen, Segments: segments, Clock: cfg.Clock, Registerer: cfg.Registerer, Logger: cfg.Logger}
	if cfg.Redis != nil {
		incr := redisincr.New(cfg.Redis, redisincr.Config{Prefix: cfg.RedisPrefix, Block: cfg.RedisBlock, Logger: cfg.Logger})
		closers = append(closers, incr.Close)
		scfg.RedisIncr = incr
	}
	s := NewService(scfg)
	// The service closes what Open opened, in reverse: engines, then the lease, then the DB.
	s.closers = closers
	return s, nil
}
