package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	flag "github.com/spf13/pflag"

	"github.com/coordkit/coordkit/libs/clock"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/idgen/idgenservice"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/lockservice"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/taskpickservice"
)

// serveConfig is everything `coord serve` can be told.
type serveConfig struct {
	addr           string
	dataDir        string
	redisAddr      string
	redisURL       string
	redisCAFile    string
	redlockAddrs   string
	zkAddrs        string
	mysqlDSN       string
	postgresURL    string
	postgresSchema string
	lockScope      string
	idWorkerLeases string
	idStore        string
	defaultBackend string
	taskDefault    string
	taskRetention  time.Duration
	taskSchedule   time.Duration
	taskGrace      time.Duration
	logLevel       string
	logFormat      string
	compressMin    int
	waitAttempts   int
	natsURL        string
	natsListen     string
	nats           natsFlags
	tlsCert        string
	tlsKey         string
	tlsClientCA    string
	tokensFile     string
	bodyTimeout    time.Duration
	maxConns       int
	sqliteSync     string
	maxStreams     int
	streamsPerTok  int
}

func (c *serveConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address to serve HTTP/1.1, h2c, Connect, gRPC and gRPC-Web on")
	fs.StringVar(&c.dataDir, "data-dir", "./coordkit-data", "directory of the embedded SQLite store")
	fs.StringVar(&c.redisAddr, "redis-addr", "", "Redis host:port, shorthand of --redis-url redis://host:port; enables the redis backends")
	fs.StringVar(&c.redisURL, "redis-url", "", "Redis URL: redis[s]://[user:pass@]host:port[/db], redis[s]+sentinel://[user:pass@]h1:26379,h2:26379[/db]?master=name or redis[s]+cluster://[user:pass@]h1:6379,h2:6379; enables the redis backends")
	fs.StringVar(&c.redisCAFile, "redis-ca-file", "", "PEM file of the CAs that sign the Redis servers' TLS certificates (rediss URLs); default the system's roots")
	fs.StringVar(&c.redlockAddrs, "redlock-addrs", "", "comma-separated independent Redis nodes (3 or 5); enables the redlock backend")
	fs.StringVar(&c.zkAddrs, "zk-addrs", "", "comma-separated ZooKeeper host:port list; enables the zookeeper backend")
	fs.StringVar(&c.mysqlDSN, "mysql-dsn", "", "MySQL/MariaDB DSN (user:pass@tcp(host:3306)/db); enables the mysql backend")
	fs.StringVar(&c.postgresURL, "postgres-url", "", "PostgreSQL URL (postgres://user:pass@host:5432/db?sslmode=verify-full); enables the postgres backend")
	fs.StringVar(&c.postgresSchema, "postgres-schema", sqldb.DefaultPostgresSchema, "PostgreSQL schema of coordkit's tables, created when missing")
	fs.StringVar(&c.lockScope, "lock-scope", "", "namespace of this deployment's locks in a shared MySQL or PostgreSQL database (default \"default\")")
	fs.StringVar(&c.taskDefault, "task-default-backend", "", "task backend for requests that name none (default: the first enabled of redis, mysql, postgres, else sqlite)")
	fs.DurationVar(&c.taskRetention, "task-retention", 0, "keep acked tasks this long (a Put of their id then reports them as existing); 0 deletes them at Ack")
	fs.DurationVar(&c.taskSchedule, "task-schedule-interval", taskpick.DefaultScheduleInterval, "how often this instance fires due task schedules; a tick fires within about this much after it is due")
	fs.DurationVar(&c.taskGrace, "task-schedule-grace", taskpick.DefaultScheduleGrace, "how late a schedule's tick may fire and still count as on time; older ticks were missed and follow the schedule's missed policy")
	fs.StringVar(&c.defaultBackend, "default-backend", "", "lock backend for requests that name none (default: the first enabled of redis, redlock, zookeeper, mysql, postgres, else sqlite)")
	fs.StringVar(&c.idStore, "id-store", idgenservice.StoreAuto, "where ID segment tags and sql worker-id leases live: auto (the database of --postgres-url or --mysql-dsn, whichever is set, else the SQLite file; both set is an error), sqlite, mysql or postgres")
	fs.StringVar(&c.idWorkerLeases, "id-worker-leases", "sql", "where snowflake worker ids are leased: sql (the --id-store: the SQLite file, MySQL or PostgreSQL) or redis (needs --redis-url or --redis-addr)")
	fs.IntVar(&c.waitAttempts, "lock-wait-attempts", lock.DefaultWaitAttempts, "per backend, how many backend attempts of blocked Acquires may run at once after their first; Release, Renew and first attempts never queue behind them")
	fs.StringVar(&c.natsURL, "nats-url", "", "NATS server URL (or a cluster's, comma-separated) for lock events and push wake-up; empty runs an embedded NATS server in-process")
	fs.StringVar(&c.natsListen, "nats-listen", "", "host:port on which the embedded NATS server also accepts outside subscribers; empty accepts none")
	c.nats.register(fs)
	fs.IntVar(&c.compressMin, "compress-min-bytes", 0, "gzip responses of at least this many bytes for clients that accept it; 0 never (best on a LAN)")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM certificate chain; with --tls-key serves HTTPS (HTTP/2 and HTTP/1.1, no h2c); reloaded on SIGHUP")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&c.tlsClientCA, "tls-client-ca", "", "PEM CA bundle; with it every client must present a certificate it signed (mutual TLS)")
	fs.StringVar(&c.tokensFile, "auth-tokens-file", "", "file with one \"name token\" pair per line; every RPC but gRPC health then needs Authorization: Bearer <token>; reloaded on SIGHUP")
	fs.DurationVar(&c.bodyTimeout, "body-timeout", 10*time.Second, "how long a request body may take to arrive after its headers (never limits server-side waits or streams)")
	fs.StringVar(&c.sqliteSync, "sqlite-synchronous", "full", "how the embedded SQLite stores sync commits: full (every acknowledged commit survives a power loss) or normal (faster; a power loss can roll back the last commits, repeating IDs and fencing tokens)")
	fs.IntVar(&c.maxConns, "max-conns", 0, "connections open at once, more wait to be accepted; 0 derives it from the file-descriptor limit, -1 no limit")
	fs.IntVar(&c.maxStreams, "max-streams", server.DefaultMaxStreams, "server streams (Watch) open at once on this instance; more are refused with resource_exhausted; -1 no limit")
	fs.IntVar(&c.streamsPerTok, "max-streams-per-token", server.DefaultMaxStreamsPerToken, "server streams one bearer token may hold open at once (with --auth-tokens-file); -1 no limit")
}

// newServeCmd builds `coord serve`.
func newServeCmd() *cobra.Command {
	var cfg serveConfig
	c := &cobra.Command{
		Use:   "serve",
		Short: "run the lock, ID and task-pick services (embedded SQLite by default)",
		Long: `Run the lock, ID and task-pick services on one address, for HTTP/1.1, h2c, Connect, gRPC and
gRPC-Web, with /metrics and grpc.health.v1. With no backend flag everything is stored in an
embedded SQLite file under --data-dir; each backend flag enables that backend.`,
		Args: argsExactly(),
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd.Context(), cfg, cmd.ErrOrStderr()) },
	}
	cfg.register(c.Flags())
	return c
}

// runServe runs the services of cfg until ctx ends, logging to stderr.
func runServe(ctx context.Context, cfg serveConfig, stderr io.Writer) error {
	logger, err := newLogger(stderr, cfg.logLevel, cfg.logFormat)
	if err != nil {
		return err
	}
	redis.SetLogger(redisLog{logger})
	// Listen before opening anything: a busy port fails before a snowflake worker id is
	// leased or a backend touched.
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", cfg.addr, err)
	}
	defer ln.Close() //nolint:errcheck // Serve closed it already, unless opening failed
	srv, closeAll, err := newServer(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeAll()
	if cfg.tlsCert != "" || cfg.tokensFile != "" {
		defer reloadOnHangup(ctx, srv, logger)()
	}
	return srv.Serve(ctx, ln)
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

// postgresConns is the pool every service shares on --postgres-url, sized as mysqlConns.
const postgresConns = 32

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
			return lockservice.Open(ctx, deps, lockservice.Config{
				RedlockAddrs: splitList(cfg.redlockAddrs), ZooKeeperAddrs: splitList(cfg.zkAddrs),
				Scope: cfg.lockScope, Default: cfg.defaultBackend, WaitAttempts: cfg.waitAttempts,
			})
		}},
		{"idgen", func(ctx context.Context, deps service.Deps) (*service.Mounted, error) {
			return idgenservice.Open(ctx, deps, idgenservice.Config{Store: cfg.idStore, WorkerLeases: cfg.idWorkerLeases})
		}},
		{"taskpick", func(ctx context.Context, deps service.Deps) (*service.Mounted, error) {
			return taskpickservice.Open(ctx, deps, taskpickservice.Config{
				Default: cfg.taskDefault, Retention: cfg.taskRetention,
				ScheduleInterval: cfg.taskSchedule, ScheduleGrace: cfg.taskGrace,
			})
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

	scfg := server.Config{
		Logger: logger, CompressMinBytes: cfg.compressMin,
		BodyTimeout: cfg.bodyTimeout, MaxConns: cfg.maxConns,
		MaxStreams: cfg.maxStreams, MaxStreamsPerToken: cfg.streamsPerTok,
	}
	// The TLS and tokens files first: a bad one fails before any backend is touched.
	if cfg.tlsCert != "" || cfg.tlsKey != "" || cfg.tlsClientCA != "" {
		t, err := server.LoadTLS(cfg.tlsCert, cfg.tlsKey, cfg.tlsClientCA)
		if err != nil {
			return fail(fmt.Errorf("--tls-cert/--tls-key/--tls-client-ca: %w", err))
		}
		scfg.TLS = t
	}
	if cfg.tokensFile != "" {
		t, err := server.LoadTokens(cfg.tokensFile, logger)
		if err != nil {
			return fail(fmt.Errorf("--auth-tokens-file: %w", err))
		}
		scfg.Tokens = t
	}
	sqliteSync, err := sqldb.ParseSynchronous(cfg.sqliteSync)
	if err != nil {
		return fail(fmt.Errorf("--sqlite-synchronous: %w", err))
	}
	srv := server.New(scfg)
	cfg.nats.serveTLS = scfg.TLS
	// Steps of this process's wall clock: the backends that keep their own clock (redis,
	// mysql, zookeeper) time leases by it, not by coordkit's steady clock; see "Clocks" in
	// docs/backends.md.
	stopWatch, err := clock.Watch(clock.WatchConfig{Logger: logger, Registerer: srv.Registry()})
	if err != nil {
		return fail(fmt.Errorf("clock watch: %w", err))
	}
	closers.Add(func() error { stopWatch(); return nil })
	deps, err := openDeps(ctx, cfg, srv, logger, &closers)
	if err != nil {
		return fail(err)
	}
	deps.SQLiteSynchronous = sqliteSync
	for _, e := range services(cfg) {
		m, err := e.open(ctx, deps)
		if err != nil {
			return fail(fmt.Errorf("%s service: %w", e.name, err))
		}
		closers.Add(m.Close)
		srv.Mount(m.Mount(e.name)) // its summary goes into the one "serving" line
	}
	return srv, closeAll, nil
}

// openDeps opens the connections every service shares, once: the event bus, and Redis,
// MySQL and PostgreSQL when configured. It adds their Close to closers.
func openDeps(ctx context.Context, cfg serveConfig, srv *server.Server, logger *slog.Logger, closers *service.Closers) (service.Deps, error) {
	deps := service.Deps{
		// The server's logger: lines logged with a request's context name its caller.
		Logger: srv.Logger(), Registerer: srv.Registry(), HandlerOptions: srv.HandlerOptions(), DataDir: cfg.dataDir,
	}
	ecfg, err := cfg.nats.eventConfig(cfg, srv, logger)
	if err != nil {
		return deps, err
	}
	bus, err := event.Open(ctx, ecfg)
	if err != nil {
		return deps, fmt.Errorf("--nats-url/--nats-listen: %w", err)
	}
	closers.Add(bus.Close)
	deps.Events = bus
	if u := bus.ClientURL(); u != "" {
		logger.Info("embedded NATS accepts clients with credentials", "url", u, "users_file", cfg.nats.usersFile, "tls", ecfg.ListenTLS != nil)
	}
	if rc := (redisconf.Config{URL: cfg.redisURL, Addr: cfg.redisAddr, CAFile: cfg.redisCAFile}); rc.Enabled() {
		// Retries off and a pool of 256: see redisconf.Parse. The URL's password never
		// reaches a log line or an error.
		shown := redisconf.Redact(cmp.Or(cfg.redisURL, "redis://"+cfg.redisAddr))
		rdb, err := redisconf.Open(ctx, rc)
		if err != nil {
			return deps, fmt.Errorf("--redis-url/--redis-addr %s: %w", shown, err)
		}
		closers.Add(rdb.Close)
		deps.Redis = rdb
		logger.Info("redis", "url", shown)
	}
	if cfg.mysqlDSN != "" {
		db, err := sqldb.OpenMySQL(ctx, cfg.mysqlDSN, mysqlConns)
		if err != nil {
			return deps, fmt.Errorf("--mysql-dsn: %w", err)
		}
		closers.Add(db.Close)
		deps.MySQL = db
	}
	if cfg.postgresURL != "" {
		shown := sqldb.RedactPostgresURL(cfg.postgresURL)
		db, err := sqldb.OpenPostgres(ctx, cfg.postgresURL, sqldb.PostgresConfig{Schema: cfg.postgresSchema, MaxConns: postgresConns})
		if err != nil {
			return deps, fmt.Errorf("--postgres-url: %w", err)
		}
		closers.Add(db.Close)
		deps.Postgres = db
		logger.Info("postgres", "url", shown, "schema", cmp.Or(cfg.postgresSchema, sqldb.DefaultPostgresSchema))
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
