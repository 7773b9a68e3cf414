package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/coordkit/coordkit/libs/sqldb"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	goredsync "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/service"
)

// Names of the things `coordbench lock` can measure.
const (
	targetServiceRedis     = "service/redis"
	targetServiceRedlock   = "service/redlock"
	targetServiceZooKeeper = "service/zookeeper"
	targetServiceMySQL     = "service/mysql"
	targetServicePostgres  = "service/postgres"
	targetServiceSQLite    = "service/sqlite"
	targetRedsync          = "redsync/redis"
	targetRedsyncRedlock   = "redsync/redlock"
)

// peers maps each service target to the library it is compared with in the same run.
var peers = map[string]string{
	targetServiceRedis:   targetRedsync,
	targetServiceRedlock: targetRedsyncRedlock,
}

// benchTTL is the lease every benchmarked acquire asks for.
const benchTTL = 10 * time.Second

// drainTimeout bounds how long a pair still in flight when a run's window closes may take
// before it is canceled.
const drainTimeout = 10 * time.Second

// benchConfig is everything `coordbench lock` can be told.
type benchConfig struct {
	clients    []int
	targets    []string
	duration   time.Duration
	warmup     time.Duration
	serverURL  string
	redisAddr  string
	redlock    []string
	zkAddrs    []string
	mysqlDSN   string
	pgURL      string
	dataDir    string
	sqliteSync string
	asJSON     bool
	cpuProfile string
	batch      int    // acquires per Batch call of the service targets; 1: single calls
	inProcess  bool   // run the service in the bench's process instead of as a child process
	serverPID  int    // the process of --server, for its CPU time; 0: unknown
	coord      string // the coord binary of the child process; empty: built (see coordBinary)
}

// allTargets lists every target in the order they run.
func allTargets() []string {
	return []string{
		targetServiceRedis, targetRedsync, targetServiceRedlock, targetRedsyncRedlock,
		targetServiceZooKeeper, targetServiceMySQL, targetServicePostgres, targetServiceSQLite,
	}
}

// benchLockFlags adds the flags of `coordbench lock` to fs and returns the function that
// checks them, after parsing, into a config.
func benchLockFlags(fs *pflag.FlagSet) func() (benchConfig, error) {
	var cfg benchConfig
	clients := fs.String("clients", "1,16,64", "comma-separated numbers of concurrent clients, one run each")
	targets := fs.String("targets", strings.Join(allTargets(), ","), "comma-separated targets to measure")
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "measured length of each run")
	fs.DurationVar(&cfg.warmup, "warmup", time.Second, "unmeasured warm-up before each run")
	fs.StringVar(&cfg.serverURL, "server", "", "base URL of a running coordkit service (its backends should be the ones the backend flags name, for the cpu/pair backend column); empty starts one as a child process, see --in-process")
	fs.IntVar(&cfg.serverPID, "server-pid", 0, "process id of the --server service on this machine, for the cpu/pair service column; 0: unknown (-)")
	fs.BoolVar(&cfg.inProcess, "in-process", false, "run the service in the bench's own process instead of as a child process (for --cpuprofile); its CPU time then counts with the clients'")
	fs.StringVar(&cfg.redisAddr, "redis-addr", "127.0.0.1:6379", "Redis host:port for redsync and the service the bench starts")
	redlockAddrs := fs.String("redlock-addrs", "127.0.0.1:6380,127.0.0.1:6381,127.0.0.1:6382", "Redlock nodes for redsync/redlock and service/redlock")
	zkAddrs := fs.String("zk-addrs", "127.0.0.1:2181", "ZooKeeper for service/zookeeper")
	fs.StringVar(&cfg.mysqlDSN, "mysql-dsn", "root@tcp(127.0.0.1:3306)/coordkit", "MySQL/MariaDB for service/mysql")
	postgresURLFlag(fs, &cfg.pgURL)
	fs.StringVar(&cfg.dataDir, "data-dir", "", "SQLite directory of the service the bench starts; empty means a temporary one")
	fs.StringVar(&cfg.sqliteSync, "sqlite-synchronous", "full", "the started service's --sqlite-synchronous: full or normal")
	fs.BoolVar(&cfg.asJSON, "json", false, "print the results as JSON instead of a table")
	coordFlag(fs, &cfg.coord)
	fs.IntVar(&cfg.batch, "batch", 1, fmt.Sprintf("acquires per call (1 to %d): above 1, each client sends its acquires in one Batch call and then its releases in another, and a pair is one acquire and its release, latency that of both calls; service targets only", server.MaxBatchOperations))
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured runs to this file (of the clients only, unless --in-process)")
	return func() (benchConfig, error) { return cfg.check(*clients, *targets, *redlockAddrs, *zkAddrs) }
}

// check completes cfg with the list flags and checks it.
func (cfg benchConfig) check(clients, targets, redlockAddrs, zkAddrs string) (benchConfig, error) {
	cfg.redlock, cfg.zkAddrs = splitList(redlockAddrs), splitList(zkAddrs)
	var err error
	if cfg.clients, err = parseClients(clients); err != nil {
		return cfg, err
	}
	if cfg.targets, err = parseTargets(targets); err != nil {
		return cfg, err
	}
	if cfg.duration <= 0 {
		return cfg, fmt.Errorf("bench: --duration %v must be positive", cfg.duration)
	}
	if cfg.warmup < 0 {
		return cfg, fmt.Errorf("bench: --warmup %v must not be negative", cfg.warmup)
	}
	if cfg.serverURL != "" && cfg.inProcess {
		return cfg, errors.New("bench: --in-process starts a service, --server names a running one: give one of them")
	}
	if cfg.batch < 1 || cfg.batch > server.MaxBatchOperations {
		return cfg, fmt.Errorf("bench: --batch %d must be within [1, %d]", cfg.batch, server.MaxBatchOperations)
	}
	if i := slices.IndexFunc(cfg.targets, func(t string) bool { return !isServiceTarget(t) }); cfg.batch > 1 && i >= 0 {
		return cfg, fmt.Errorf("bench: --batch %d: %s has no batches; measure only service targets", cfg.batch, cfg.targets[i])
	}
	if cfg.serverPID < 0 || (cfg.serverPID > 0 && cfg.serverURL == "") {
		return cfg, fmt.Errorf("bench: --server-pid %d needs --server and must be positive", cfg.serverPID)
	}
	return cfg, nil
}

// parseClients parses a comma-separated list of positive client counts.
func parseClients(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bench: --clients: %q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseTargets parses a comma-separated list of known target names, keeping their order.
func parseTargets(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		name := strings.TrimSpace(f)
		if !slices.Contains(allTargets(), name) {
			return nil, fmt.Errorf("bench: --targets: unknown target %q (known: %s)", name, strings.Join(allTargets(), ", "))
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// benchLock implements `coordbench lock`: it measures acquire+release pairs per second, the
// latency of one pair and the CPU time one pair costs the client, the service and the backend
// on every selected target at every client count, one run at a time, and prints a table (or
// JSON) with the service-to-redsync throughput and CPU ratios.
func benchLock(ctx context.Context, cfg benchConfig, stdout, stderr io.Writer) error {
	results, err := measureLock(ctx, cfg, stderr)
	if results == nil && err != nil {
		return err
	}
	if werr := writeReport(stdout, results, cfg.asJSON); werr != nil {
		return errors.Join(werr, err)
	}
	return err
}

// measureLock opens the targets, runs them and closes them; the results are those of the
// runs that completed, even when it also returns an error.
func measureLock(ctx context.Context, cfg benchConfig, stderr io.Writer) ([]runResult, error) {
	targets, closeTargets, err := openTargets(ctx, cfg, stderr)
	if err != nil {
		return nil, err
	}
	results, runErr := profiled(cfg.cpuProfile, func() ([]runResult, error) {
		return runAll(ctx, cfg, targets, stderr)
	})
	return results, errors.Join(runErr, closeTargets())
}

// profiled runs fn, under a CPU profile written to path unless path is empty.
func profiled(path string, fn func() ([]runResult, error)) ([]runResult, error) {
	if path == "" {
		return fn()
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: --cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: --cpuprofile: %w", err)
	}
	results, err := fn()
	pprof.StopCPUProfile()
	if cerr := f.Close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("bench: --cpuprofile: %w", cerr))
	}
	return results, err
}

// runAll measures every target at every client count, one run after another with a garbage
// collection in between, and stops early when ctx ends.
func runAll(ctx context.Context, cfg benchConfig, targets map[string]benchTarget, stderr io.Writer) ([]runResult, error) {
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	var results []runResult
	for _, target := range cfg.targets {
		for _, n := range cfg.clients {
			runtime.GC()
			run := fmt.Sprintf("%s.%s.c%d", stamp, target, n)
			t := targets[target]
			r := runLoadCPU(ctx, t.pair, run, n, cfg.warmup, cfg.duration, &t.procs, cfg.batch)
			r.Target = target
			if cfg.batch > 1 {
				r.Target = fmt.Sprintf("%s batch %d", target, cfg.batch)
			}
			if ctx.Err() != nil {
				return results, fmt.Errorf("bench: %w", context.Cause(ctx))
			}
			if r.Errors > 0 {
				fmt.Fprintf(stderr, "bench: %s at %d clients: %d errors, first: %s\n", target, n, r.Errors, r.FirstError)
			}
			results = append(results, r)
		}
	}
	return results, nil
}

// pairFunc acquires and then releases the lock on key once; any failure, including a lock
// that was not acquired or not released, is an error.
type pairFunc func(ctx context.Context, key string) error

// benchTarget is one target ready to run: its pair function and the processes it costs
// CPU time in.
type benchTarget struct {
	pair  pairFunc
	procs runProcs
}

// openTargets prepares the selected targets: it starts the service (a child process, or
// in-process with --in-process) unless --server names one, connects to Redis for redsync
// and finds the processes of each target's service and backend. It returns the targets and
// the function that stops and closes everything it opened.
func openTargets(ctx context.Context, cfg benchConfig, stderr io.Writer) (map[string]benchTarget, func() error, error) {
	var closers service.Closers
	warn := func(msg string) { fmt.Fprintln(stderr, msg) }
	self := pidGroup(os.Getpid())
	backends := backendProcs(ctx, cfg, warn)
	targets := map[string]benchTarget{}
	if slices.ContainsFunc(cfg.targets, isServiceTarget) {
		url, svc, err := openService(ctx, cfg, &closers, warn)
		if err != nil {
			return nil, nil, closers.Fail(err)
		}
		c := client.New(url)
		for _, target := range cfg.targets {
			if isServiceTarget(target) {
				targets[target] = benchTarget{
					pair:  servicePair(c, strings.TrimPrefix(target, "service/"), cfg.batch),
					procs: runProcs{client: self, service: svc, backend: backends[targetBackend(target)], inProcess: cfg.inProcess},
				}
			}
		}
	}
	for target, addrs := range map[string][]string{targetRedsync: {cfg.redisAddr}, targetRedsyncRedlock: cfg.redlock} {
		if !slices.Contains(cfg.targets, target) {
			continue
		}
		pair, closeRedis, err := openRedsync(ctx, addrs, slices.Max(cfg.clients))
		if err != nil {
			return nil, nil, closers.Fail(err)
		}
		closers.Add(closeRedis)
		targets[target] = benchTarget{pair: pair, procs: runProcs{client: self, service: procGroup{none: true}, backend: backends[targetBackend(target)]}}
	}
	return targets, closers.Close, nil
}

// openService starts the service the bench measures, unless --server names one, adding its
// stop to closers. It returns its base URL and its process for the CPU columns: the child's;
// none when in-process (the client's process counts it); --server-pid or unknown with
// --server.
func openService(ctx context.Context, cfg benchConfig, closers *service.Closers, warn func(string)) (string, procGroup, error) {
	if cfg.serverURL != "" {
		if cfg.serverPID > 0 {
			return cfg.serverURL, pidGroup(cfg.serverPID), nil
		}
		return cfg.serverURL, procGroup{}, nil
	}
	dataDir, removeDir, err := benchDataDir(cfg)
	if err != nil {
		return "", procGroup{}, err
	}
	closers.Add(removeDir) // after the service stopped: closers close last added first
	scfg := benchServeConfig(cfg, dataDir)
	if scfg.pgURL != "" {
		// A schema of the run's own, dropped after it: the rows and dead row versions of
		// earlier runs (a dev server may run without autovacuum) do not slow this one.
		scfg.pgSchema = "coordkit_lockbench_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		closers.Add(func() error { return dropSchema(context.WithoutCancel(ctx), scfg.pgURL, scfg.pgSchema) })
	}
	if cfg.inProcess {
		url, stop, err := startService(ctx, scfg)
		if err != nil {
			return "", procGroup{}, err
		}
		closers.Add(stop)
		return url, procGroup{none: true}, nil
	}
	exe, err := coordBinary(ctx, cfg.coord)
	if err != nil {
		return "", procGroup{}, err
	}
	p, err := startServiceProcess(ctx, exe, scfg, warn)
	if err != nil {
		return "", procGroup{}, err
	}
	closers.Add(func() error {
		err := p.stop()
		if out := p.out.String(); err == nil && out != "" {
			warn("bench: the service process logged: " + out) // its errors explain the rows' errors
		}
		return err
	})
	return p.url, pidGroup(p.pid), nil
}

// benchDataDir returns the SQLite directory of the service the bench starts, --data-dir or a
// temporary one, and the function that removes it when it is temporary.
func benchDataDir(cfg benchConfig) (string, func() error, error) {
	if cfg.dataDir != "" {
		return cfg.dataDir, func() error { return nil }, nil
	}
	dir, err := os.MkdirTemp("", "coord-bench-")
	if err != nil {
		return "", nil, fmt.Errorf("bench: %w", err)
	}
	return dir, func() error { return os.RemoveAll(dir) }, nil
}

// benchServeConfig is the `coord serve` configuration of the service the bench starts: the
// backends of the selected targets, logging errors only; addr is set where it starts.
func benchServeConfig(cfg benchConfig, dataDir string) serveConfig {
	scfg := serveConfig{dataDir: dataDir, logLevel: "error", logFormat: "text", sqliteSync: cfg.sqliteSync}
	if slices.Contains(cfg.targets, targetServiceRedis) {
		scfg.redisAddr = cfg.redisAddr
	}
	if slices.Contains(cfg.targets, targetServiceRedlock) {
		scfg.redlockAddrs = strings.Join(cfg.redlock, ",")
	}
	if slices.Contains(cfg.targets, targetServiceZooKeeper) {
		scfg.zkAddrs = strings.Join(cfg.zkAddrs, ",")
	}
	if slices.Contains(cfg.targets, targetServiceMySQL) {
		scfg.mysqlDSN = cfg.mysqlDSN
		scfg.lockScope = "bench"
	}
	if slices.Contains(cfg.targets, targetServicePostgres) {
		scfg.pgURL = cfg.pgURL
		scfg.lockScope = "bench"
	}
	return scfg
}

// servicePair returns a pair function that acquires and releases through the lock service
// on the named backend; with batch above 1, batch keys at once (batchPair).
func servicePair(c *client.Client, backend string, batch int) pairFunc {
	ttl := durationpb.New(benchTTL)
	if batch > 1 {
		return batchPair(c, backend, batch, ttl)
	}
	return func(ctx context.Context, key string) error {
		res, err := c.Locks().Acquire(ctx, &lockv1.AcquireRequest{Key: key, Backend: backend, Ttl: ttl})
		if err != nil {
			return fmt.Errorf("acquire: %w", err)
		}
		if !res.GetAcquired() {
			return fmt.Errorf("acquire %s: not acquired", key)
		}
		rel, err := c.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Backend: backend, Owner: res.GetLease().GetOwner()})
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		if !rel.GetReleased() {
			return fmt.Errorf("release %s: not released", key)
		}
		return nil
	}
}

// batchPair returns a pair function that acquires batch keys (key:0, key:1, …) in one Batch
// call and releases them in another.
func batchPair(c *client.Client, backend string, batch int, ttl *durationpb.Duration) pairFunc {
	return func(ctx context.Context, key string) error {
		ops := make([]*lockv1.BatchOperation, batch)
		for i := range ops {
			ops[i] = &lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Acquire{Acquire: &lockv1.AcquireRequest{
				Key: key + ":" + strconv.Itoa(i), Backend: backend, Ttl: ttl}}}
		}
		res, err := c.Locks().Batch(ctx, &lockv1.BatchRequest{Operations: ops})
		if err != nil {
			return fmt.Errorf("batch acquire: %w", err)
		}
		for i, r := range res.GetResults() {
			a := r.GetAcquire()
			if !a.GetAcquired() {
				return fmt.Errorf("batch acquire %s:%d: not acquired (%s)", key, i, r.GetError().GetMessage())
			}
			ops[i] = &lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Release{Release: &lockv1.ReleaseRequest{
				Key: key + ":" + strconv.Itoa(i), Backend: backend, Owner: a.GetLease().GetOwner()}}}
		}
		res, err = c.Locks().Batch(ctx, &lockv1.BatchRequest{Operations: ops})
		if err != nil {
			return fmt.Errorf("batch release: %w", err)
		}
		for i, r := range res.GetResults() {
			if !r.GetRelease().GetReleased() {
				return fmt.Errorf("batch release %s:%d: not released (%s)", key, i, r.GetError().GetMessage())
			}
		}
		return nil
	}
}

// openRedsync connects one go-redis client per address, each with room for poolSize
// concurrent callers, and returns a pair function that locks and unlocks with redsync on
// them (one address: a single-instance lock; several: Redlock over independent nodes), and
// the function that closes the clients.
func openRedsync(ctx context.Context, addrs []string, poolSize int) (pairFunc, func() error, error) {
	var pools []redsyncredis.Pool
	var closers service.Closers
	for _, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: max(poolSize, 10)})
		closers.Add(rdb.Close)
		if err := rdb.Ping(ctx).Err(); err != nil {
			return nil, nil, closers.Fail(fmt.Errorf("bench: redsync node %s: %w", addr, err))
		}
		pools = append(pools, goredsync.NewPool(rdb))
	}
	rs := redsync.New(pools...)
	pair := func(ctx context.Context, key string) error {
		m := rs.NewMutex(key, redsync.WithExpiry(benchTTL), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		ok, err := m.UnlockContext(ctx)
		if err != nil {
			return fmt.Errorf("unlock: %w", err)
		}
		if !ok {
			return fmt.Errorf("unlock %s: not released", key)
		}
		return nil
	}
	return pair, closers.Close, nil
}

// isServiceTarget reports whether target goes through the coordkit service.
func isServiceTarget(target string) bool { return strings.HasPrefix(target, "service/") }

// runLoad runs pair from clients goroutines, each on its own key bench:<run>:<i>, for warmup
// and then duration, and summarizes the pairs that completed inside the measured window.
// Every goroutine stops starting pairs when the window closes or ctx ends.
func runLoad(ctx context.Context, pair pairFunc, run string, clients int, warmup, duration time.Duration) runResult {
	return runLoadCPU(ctx, pair, run, clients, warmup, duration, nil, 1)
}

// runLoadCPU is runLoad that also samples the CPU time of procs at the start and the end of
// the measured window, unless procs is nil, for the CPU time per pair. Each call of pair
// makes batch pairs (batchPair), counted as such; the latencies stay those of the calls.
func runLoadCPU(ctx context.Context, pair pairFunc, run string, clients int, warmup, duration time.Duration, procs *runProcs, batch int) runResult {
	from := time.Now().Add(warmup)
	end := from.Add(duration)
	runCtx, cancel := context.WithDeadline(ctx, end.Add(drainTimeout))
	defer cancel()

	samples := make([]workerResult, clients)
	var wg sync.WaitGroup
	for i := range clients {
		key := fmt.Sprintf("bench:%s:%d", run, i)
		wg.Go(func() { samples[i] = worker(runCtx, pair, key, from, end) })
	}
	var cpuStart, cpuStop cpuSample
	cpuOK := false
	if procs != nil {
		wg.Go(func() { cpuStart, cpuStop, cpuOK = procs.sampleWindow(runCtx, from, end) })
	}
	wg.Wait()
	r := summarize(samples, clients, duration)
	r.Pairs *= batch
	r.PairsPerSec *= float64(batch)
	if procs != nil {
		r.CPU = procs.perPair(cpuStart, cpuStop, cpuOK, r.Pairs)
	}
	return r
}

// workerResult is what one client goroutine measured.
type workerResult struct {
	latencies []time.Duration
	errors    int
	firstErr  error
}

// worker runs pair on key back to back until end or ctx ends, and keeps the latencies and
// errors of the pairs that completed inside [from, end].
func worker(ctx context.Context, pair pairFunc, key string, from, end time.Time) workerResult {
	var r workerResult
	for ctx.Err() == nil {
		start := time.Now()
		if !start.Before(end) {
			break
		}
		err := pair(ctx, key)
		done := time.Now()
		if done.Before(from) || done.After(end) {
			continue
		}
		if err != nil {
			r.errors++
			if r.firstErr == nil {
				r.firstErr = err
			}
			continue
		}
		r.latencies = append(r.latencies, done.Sub(start))
	}
	return r
}

// dropSchema drops the PostgreSQL schema a run's service kept its tables in.
func dropSchema(ctx context.Context, url, schema string) error {
	db, err := sqldb.OpenPostgres(ctx, url, sqldb.PostgresConfig{Schema: schema, MaxConns: 1})
	if err != nil {
		return fmt.Errorf("bench: drop schema %s: %w", schema, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "DROP SCHEMA "+sqldb.QuoteIdent(schema)+" CASCADE"); err != nil {
		return fmt.Errorf("bench: drop schema %s: %w", schema, err)
	}
	return nil
}
