package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/config"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/proto/gen/coordkit/idgen/v1/idgenv1connect"
	"github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1/lockv1connect"
	"github.com/coordkit/coordkit/services/idgen"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/redislock"
	"github.com/coordkit/coordkit/services/lock/redlock"
	"github.com/coordkit/coordkit/services/lock/sqllock"
	"github.com/coordkit/coordkit/services/lock/zklock"
)

// serveConfig is everything `coord serve` can be told.
type serveConfig struct {
	addr           string
	dataDir        string
	redisAddr      string
	redlockAddrs   string
	zkAddrs        string
	mysqlDSN       string
	lockScope      string
	idWorkerLeases string
	defaultBackend string
	logLevel       string
	logFormat      string
	compressMin    int
	waitAttempts   int
	natsURL        string
	natsListen     string
}

func (c *serveConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address to serve HTTP/1.1, h2c, Connect, gRPC and gRPC-Web on")
	fs.StringVar(&c.dataDir, "data-dir", "./coordkit-data", "directory of the embedded SQLite store")
	fs.StringVar(&c.redisAddr, "redis-addr", "", "Redis host:port; enables the redis lock backend")
	fs.StringVar(&c.redlockAddrs, "redlock-addrs", "", "comma-separated independent Redis nodes (3 or 5); enables the redlock backend")
	fs.StringVar(&c.zkAddrs, "zk-addrs", "", "comma-separated ZooKeeper host:port list; enables the zookeeper backend")
	fs.StringVar(&c.mysqlDSN, "mysql-dsn", "", "MySQL/MariaDB DSN (user:pass@tcp(host:3306)/db); enables the mysql backend")
	fs.StringVar(&c.lockScope, "lock-scope", "", "namespace of this deployment's locks in a shared MySQL database (default \"default\")")
	fs.StringVar(&c.defaultBackend, "default-backend", "", "lock backend for requests that name none (default: the first enabled of redis, redlock, zookeeper, mysql, else sqlite)")
	fs.StringVar(&c.idWorkerLeases, "id-worker-leases", "sql", "where snowflake worker ids are leased: sql (the SQLite file, or MySQL with --mysql-dsn) or redis (needs --redis-addr)")
	fs.IntVar(&c.waitAttempts, "lock-wait-attempts", lock.DefaultWaitAttempts, "per backend, how many backend attempts of blocked Acquires may run at once after their first; Release, Renew and first attempts never queue behind them")
	fs.StringVar(&c.natsURL, "nats-url", "", "NATS server URL (or a cluster's, comma-separated) for lock events and push wake-up; empty runs an embedded NATS server in-process")
	fs.StringVar(&c.natsListen, "nats-listen", "", "host:port on which the embedded NATS server also accepts outside subscribers; empty accepts none")
	fs.IntVar(&c.compressMin, "compress-min-bytes", 0, "gzip responses of at least this many bytes for clients that accept it; 0 never (best on a LAN)")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "text or json")
}

func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = config.Usage(fs, "coord serve [flags]")
	var cfg serveConfig
	cfg.register(fs)
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	logger, err := newLogger(stderr, cfg.logLevel, cfg.logFormat)
	if err != nil {
		return err
	}
	redis.SetLogger(redisLog{logger})
	srv, closeAll, err := newServer(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeAll()
	return srv.ListenAndServe(ctx)
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is neither text nor json", format)
}

// newServer opens the configured backends and returns a server with every service mounted,
// and the function that closes what it opened.
func newServer(ctx context.Context, cfg serveConfig, logger *slog.Logger) (*server.Server, func(), error) {
	var closers []func() error
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			if err := closers[i](); err != nil {
				logger.Warn("close", "error", err)
			}
		}
	}
	fail := func(err error) (*server.Server, func(), error) {
		closeAll()
		return nil, nil, err
	}

	srv := server.New(server.Config{Addr: cfg.addr, Logger: logger, CompressMinBytes: cfg.compressMin})
	bus, err := event.Open(ctx, event.Config{URL: cfg.natsURL, Listen: cfg.natsListen, Logger: logger, Registerer: srv.Registry()})
	if err != nil {
		return fail(fmt.Errorf("--nats-url/--nats-listen: %w", err))
	}
	closers = append(closers, bus.Close) // closed last: the services publish until they close
	if u := bus.ClientURL(); u != "" {
		logger.Info("embedded NATS accepts subscribers", "url", u)
	}

	backends := map[string]lock.Backend{}
	sq, err := sqllock.OpenSQLite(ctx, filepath.Join(cfg.dataDir, "locks.db"), sqllock.WithLogger(logger))
	if err != nil {
		return fail(err)
	}
	closers = append(closers, sq.Close)
	backends["sqlite"] = sq

	var rdb *redis.Client
	if cfg.redisAddr != "" {
		rdb = redis.NewClient(&redis.Options{Addr: cfg.redisAddr, PoolSize: 256, MaxRetries: -1})
		closers = append(closers, rdb.Close)
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fail(fmt.Errorf("--redis-addr %s: %w", cfg.redisAddr, err))
		}
		backends["redis"] = redislock.New(rdb, "")
	}
	if cfg.redlockAddrs != "" {
		b, err := redlock.Open(ctx, splitList(cfg.redlockAddrs), redlock.Config{})
		if err != nil {
			return fail(fmt.Errorf("--redlock-addrs: %w", err))
		}
		closers = append(closers, b.Close)
		backends["redlock"] = b
	}
	if cfg.zkAddrs != "" {
		b, err := zklock.Open(ctx, splitList(cfg.zkAddrs), zklock.Config{Logger: logger})
		if err != nil {
			return fail(fmt.Errorf("--zk-addrs: %w", err))
		}
		closers = append(closers, b.Close)
		backends["zookeeper"] = b
	}
	if cfg.mysqlDSN != "" {
		b, err := sqllock.OpenMySQL(ctx, cfg.mysqlDSN, cfg.lockScope, sqllock.WithLogger(logger))
		if err != nil {
			return fail(fmt.Errorf("--mysql-dsn: %w", err))
		}
		closers = append(closers, b.Close)
		backends["mysql"] = b
	}
	def := cfg.defaultBackend
	if def == "" {
		def = "sqlite"
		for _, name := range []string{"redis", "redlock", "zookeeper", "mysql"} {
			if backends[name] != nil {
				def = name
				break
			}
		}
	}

	svc, err := lock.NewService(lock.Config{
		Backends: backends, Default: def, Registerer: srv.Registry(), Logger: logger,
		WaitAttempts: cfg.waitAttempts, Events: bus,
	})
	if err != nil {
		return fail(fmt.Errorf("--default-backend: %w", err))
	}
	srv.Handle(lockv1connect.NewLockServiceHandler(svc, srv.HandlerOptions()...))

	idCfg := idgen.StoreConfig{
		SQLitePath:   filepath.Join(cfg.dataDir, "idgen.db"),
		MySQLDSN:     cfg.mysqlDSN, // segments and worker leases on MySQL when given
		WorkerLeases: cfg.idWorkerLeases,
		Registerer:   srv.Registry(),
		Logger:       logger,
	}
	if rdb != nil { // a nil *redis.Client in the interface field would not be nil
		idCfg.Redis = rdb
	}
	ids, err := idgen.Open(ctx, idCfg)
	if err != nil {
		return fail(fmt.Errorf("id service: %w", err))
	}
	closers = append(closers, ids.Close) // closed before Redis, so it can release its lease
	srv.Handle(idgenv1connect.NewIdServiceHandler(ids, srv.HandlerOptions()...))
	logger.Info("lock backends", "enabled", strings.Join(slices.Sorted(maps.Keys(backends)), ","), "default", def)
	return srv, closeAll, nil
}

// splitList splits a comma-separated flag value, dropping empty items and spaces.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// redisLog sends go-redis's own messages (such as failed dials to a Redlock node that is down,
// which the backends already report as unavailable) to the service's log at debug.
type redisLog struct{ log *slog.Logger }

// Printf implements go-redis's internal.Logging.
func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}
