package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/config"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/idgen"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/lockservice"
	"github.com/coordkit/coordkit/services/taskpick/taskpickservice"
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
	taskDefault    string
	taskRetention  time.Duration
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
	fs.StringVar(&c.taskDefault, "task-default-backend", "", "task backend for requests that name none (default: the first enabled of redis, mysql, else sqlite)")
	fs.DurationVar(&c.taskRetention, "task-retention", 0, "keep acked tasks this long (a Put of their id then reports them as existing); 0 deletes them at Ack")
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

// mysqlConns is the pool every service shares on --mysql-dsn: the lock backend runs at most
// 12 TryAcquires at once on it and keeps 4 for Release and Renew; the ID engines need a
// few.
const mysqlConns = 32

// serviceEntry is one service `coord serve` mounts: open builds it on the shared Deps.
type serviceEntry struct {
	name string
	open func(context.Context, service.Deps) (*service.Mounted, error)
}

// services lists every service `coord serve` mounts, in opening order (they close in
// reverse, before the shared connections).
func services(cfg serveConfig) []serviceEntry {
	return []serviceEntry{
		{"lock", func(ctx context.Context, deps service.Deps) (*service.Mounted, error) {
			return lockservice.Open(ctx, deps, lockservice.OpenConfig{
				RedlockAddrs: splitList(cfg.redlockAddrs), ZooKeeperAddrs: splitList(cfg.zkAddrs),
				Scope: cfg.lockScope, Default: cfg.defaultBackend, WaitAttempts: cfg.waitAttempts,
			})
		}},
		{"idgen", func(ctx context.Context, deps service.Deps) (*service.Mounted, error) {
			return idgen.Open(ctx, deps, idgen.OpenConfig{WorkerLeases: cfg.idWorkerLeases})
		}},
		{"taskpick", func(ctx context.Context, deps service.Deps) (*service.Mounted, error) {
			return taskpickservice.Open(ctx, deps, taskpickservice.OpenConfig{Default: cfg.taskDefault, Retention: cfg.taskRetention})
		}},
	}
}

// newServer opens the connections the services share, then every service, and returns a
// server with them mounted and the function that closes what it opened: the services first,
// last opened first, then the shared connections (the event bus last: the services publish
// until they close).
func newServer(ctx context.Context, cfg serveConfig, logger *slog.Logger) (*server.Server, func(), error) {
	var closers service.Closers
	closeAll := func() {
		if err := closers.Close(); err != nil {
			logger.Warn("close", "error", err)
		}
	}
	fail := func(err error) (*server.Server, func(), error) {
		closeAll()
		return nil, nil, err
	}

	srv := server.New(server.Config{Addr: cfg.addr, Logger: logger, CompressMinBytes: cfg.compressMin})
	deps, err := openDeps(ctx, cfg, srv, logger, &closers)
	if err != nil {
		return fail(err)
	}
	for _, e := range services(cfg) {
		m, err := e.open(ctx, deps)
		if err != nil {
			return fail(fmt.Errorf("%s service: %w", e.name, err))
		}
		closers.Add(m.Close)
		srv.Handle(m.Path, m.Handler)
		logger.Info("service", append([]any{"name", e.name}, m.Summary...)...)
	}
	return srv, closeAll, nil
}

// openDeps opens the connections every service shares, once: the event bus, and Redis and
// MySQL when configured. It adds their Close to closers.
func openDeps(ctx context.Context, cfg serveConfig, srv *server.Server, logger *slog.Logger, closers *service.Closers) (service.Deps, error) {
	deps := service.Deps{
		Logger: logger, Registerer: srv.Registry(), HandlerOptions: srv.HandlerOptions(), DataDir: cfg.dataDir,
	}
	bus, err := event.Open(ctx, event.Config{URL: cfg.natsURL, Listen: cfg.natsListen, Logger: logger, Registerer: srv.Registry()})
	if err != nil {
		return deps, fmt.Errorf("--nats-url/--nats-listen: %w", err)
	}
	closers.Add(bus.Close)
	deps.Events = bus
	if u := bus.ClientURL(); u != "" {
		logger.Info("embedded NATS accepts subscribers", "url", u)
	}
	if cfg.redisAddr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: cfg.redisAddr, PoolSize: 256, MaxRetries: -1})
		closers.Add(rdb.Close)
		if err := rdb.Ping(ctx).Err(); err != nil {
			return deps, fmt.Errorf("--redis-addr %s: %w", cfg.redisAddr, err)
		}
		deps.Redis = rdb
	}
	if cfg.mysqlDSN != "" {
		db, err := sqldb.OpenMySQL(ctx, cfg.mysqlDSN, mysqlConns)
		if err != nil {
			return deps, fmt.Errorf("--mysql-dsn: %w", err)
		}
		closers.Add(db.Close)
		deps.MySQL = db
	}
	return deps, nil
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
