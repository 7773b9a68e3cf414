package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/redistask"
	"github.com/coordkit/coordkit/services/taskpick/taskpickservice"
)

// taskBenchConfig is everything `coordbench task` can be told.
type taskBenchConfig struct {
	tasks    int
	workers  int
	backends []string
	counts   []int
	work     bool
	unique   bool
	// rate is the limit of the rate-limited pool run per backend (0: no such run), measured
	// for rateDuration.
	rate         float64
	rateBurst    int
	rateDuration time.Duration
	asynq        bool
	river        bool
	redisAddr    string
	mysqlDSN     string
	// postgresURL is the PostgreSQL database of the postgres backend (each run in a schema of
	// its own, dropped afterwards) and of River (in riverSchema).
	postgresURL string
	riverSchema string
	asynqDB     int
	timeout     time.Duration
	asJSON      bool
	// sqliteSync is how the in-process SQLite store syncs commits (--sqlite-synchronous).
	sqliteSync sqldb.Synchronous
}

// taskBenchBackends are the backends `coordbench task` knows, in the order they run: every
// one of taskpickservice.Backends.
var taskBenchBackends = service.Preference(taskpickservice.Backends)

// taskBenchTTL is the lease of every benchmarked pick: far longer than a run, so no task
// is ever recovered and picked twice.
const taskBenchTTL = 5 * time.Minute

// taskResult is one run: n no-op tasks put, then picked and acked by the workers.
type taskResult struct {
	Target      string        `json:"target"`
	Count       int           `json:"count"`
	Tasks       int           `json:"tasks"`
	PutPerSec   float64       `json:"put_per_sec"`
	TasksPerSec float64       `json:"tasks_per_sec"`
	Ratio       float64       `json:"ratio_vs_asynq,omitempty"`
	RatioRiver  float64       `json:"ratio_vs_river,omitempty"`
	PickP50     time.Duration `json:"pick_p50_ns"`
	PickP99     time.Duration `json:"pick_p99_ns"`
	Errors      int           `json:"errors"`
	FirstError  string        `json:"first_error,omitempty"`
	// RateLimit is the pool's rate limit in a rate run, RateRatio its tasks/s over it.
	RateLimit float64 `json:"rate_limit,omitempty"`
	RateRatio float64 `json:"ratio_vs_limit,omitempty"`
}

// benchTask implements `coordbench task`: per backend, an in-process task service on a
// loopback port, where the workers pick (count at a time) and ack N no-op tasks put
// beforehand, and the SDK's Work does the same; then hibiken/asynq on the same Redis and
// River on the same PostgreSQL as the peers. It prints tasks/s, the ratios to asynq and
// River and the latency of a Pick.
func benchTask(ctx context.Context, cfg taskBenchConfig, stdout, stderr io.Writer) error {
	results, err := measureTasks(ctx, cfg, stderr)
	if werr := writeTaskReport(stdout, results, cfg.asJSON); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// measureTasks runs every backend of cfg and then asynq; the results are those of the runs
// that completed, even when it also returns an error.
func measureTasks(ctx context.Context, cfg taskBenchConfig, stderr io.Writer) ([]taskResult, error) {
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	var results []taskResult
	var errs []error
	for _, backend := range cfg.backends {
		rs, err := benchTaskBackend(ctx, cfg, backend, stamp, stderr)
		results = append(results, rs...)
		if err != nil {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if cfg.asynq && ctx.Err() == nil {
		r, err := benchAsynq(ctx, cfg)
		if err != nil {
			errs = append(errs, err)
		} else {
			results = append(results, r)
		}
	}
	if cfg.asynq && cfg.unique && ctx.Err() == nil {
		r, err := benchAsynqUnique(ctx, cfg)
		if err != nil {
			errs = append(errs, err)
		} else {
			results = append(results, r)
		}
	}
	if cfg.river && ctx.Err() == nil {
		r, err := benchRiver(ctx, cfg)
		if err != nil {
			errs = append(errs, err)
		} else {
			results = append(results, r)
		}
	}
	addAsynqRatios(results)
	addRiverRatios(results)
	addUniqueRatios(results)
	for _, r := range results {
		if r.RatioRiver > 0 && strings.HasSuffix(r.Target, "/postgres") {
			fmt.Fprintf(stderr, "bench: %s count %d: %.2f× river's tasks/s\n", r.Target, r.Count, r.RatioRiver)
		}
		if r.Errors > 0 {
			fmt.Fprintf(stderr, "bench: %s count %d: %d errors, first: %s\n", r.Target, r.Count, r.Errors, r.FirstError)
		}
	}
	return results, errors.Join(errs...)
}

// benchTaskFlags adds the flags of `coordbench task` to fs and returns the function that
// checks them, after parsing, into a config.
func benchTaskFlags(fs *pflag.FlagSet) func() (taskBenchConfig, error) {
	var cfg taskBenchConfig
	fs.IntVar(&cfg.tasks, "tasks", 20000, "no-op tasks per run")
	fs.IntVar(&cfg.workers, "workers", 16, "concurrent workers (goroutines picking and acking; asynq's concurrency)")
	backends := fs.String("backends", strings.Join(taskBenchBackends, ","), "comma-separated backends to measure")
	counts := fs.String("counts", "1,10", "comma-separated tasks per Pick, one run each")
	fs.BoolVar(&cfg.work, "work", true, "also run the SDK's Work (WithConcurrency(workers), WithBatch(largest count)) per backend")
	fs.BoolVar(&cfg.unique, "unique", true, "also measure Puts with unique keys (half of them duplicates) per backend, and asynq.Unique as their peer")
	fs.Float64Var(&cfg.rate, "rate", 0, "per backend but sqlite, also pick a pool limited to this many tasks a second (--rate-burst) through 2 services over the store and report the measured rate over it; 0 (the default) skips it")
	fs.IntVar(&cfg.rateBurst, "rate-burst", 1, "the rate-limited pool's burst (its bucket's size)")
	fs.DurationVar(&cfg.rateDuration, "rate-duration", 5*time.Second, "how long the rate-limited pool is picked")
	fs.BoolVar(&cfg.asynq, "asynq", true, "measure hibiken/asynq on --redis-addr as the peer")
	fs.StringVar(&cfg.redisAddr, "redis-addr", "127.0.0.1:6379", "Redis of the redis backend and of asynq")
	fs.StringVar(&cfg.mysqlDSN, "mysql-dsn", "root@tcp(127.0.0.1:3306)/coordkit", "MySQL/MariaDB of the mysql backend")
	fs.StringVar(&cfg.postgresURL, "postgres-url", "postgres://postgres@127.0.0.1:5432/coordkit?sslmode=disable&options=-c%20synchronous_commit%3Don", "PostgreSQL of the postgres backend (a schema per run, dropped after it) and of River")
	fs.BoolVar(&cfg.river, "river", true, "measure riverqueue/river on --postgres-url as the peer of the postgres backend")
	fs.StringVar(&cfg.riverSchema, "river-schema", "coordkit_river", "schema River's tables live in (created and migrated when missing; the run deletes its jobs after it)")
	fs.IntVar(&cfg.asynqDB, "asynq-db", 15, "Redis database number asynq runs in: it is FLUSHED before and after")
	fs.DurationVar(&cfg.timeout, "timeout", 5*time.Minute, "longest a run may take")
	fs.BoolVar(&cfg.asJSON, "json", false, "print the results as JSON instead of a table")
	return func() (taskBenchConfig, error) { return cfg.check(*counts, *backends) }
}

// check completes cfg with the list flags and checks it.
func (cfg taskBenchConfig) check(counts, backends string) (taskBenchConfig, error) {
	if cfg.tasks < 1 || cfg.workers < 1 || cfg.timeout <= 0 {
		return cfg, errors.New("bench: --tasks, --workers and --timeout must be positive")
	}
	if cfg.rate < 0 || cfg.rate > 1_000_000 || (cfg.rate > 0 && (cfg.rateDuration <= 0 || cfg.rateBurst < 1)) {
		return cfg, errors.New("bench: --rate must be 0 to 1,000,000, and --rate-duration and --rate-burst positive")
	}
	var err error
	if cfg.counts, err = parseClients(counts); err != nil {
		return cfg, fmt.Errorf("bench: --counts: %w", err)
	}
	if slices.Max(cfg.counts) > taskpick.MaxPickCount {
		return cfg, fmt.Errorf("bench: --counts: at most %d tasks per Pick", taskpick.MaxPickCount)
	}
	for _, b := range splitList(backends) {
		if !slices.Contains(taskBenchBackends, b) {
			return cfg, fmt.Errorf("bench: --backends: unknown backend %q (known: %s)", b, strings.Join(taskBenchBackends, ", "))
		}
		if !slices.Contains(cfg.backends, b) {
			cfg.backends = append(cfg.backends, b)
		}
	}
	return cfg, nil
}

// benchTaskBackend starts a service on backend and measures a run per count, then Work.
func benchTaskBackend(ctx context.Context, cfg taskBenchConfig, backend, stamp string, stderr io.Writer) ([]taskResult, error) {
	url, stop, err := startTaskService(ctx, cfg, backend, stamp)
	if err != nil {
		return nil, err
	}
	var out []taskResult
	var picks pickTimes
	c := client.New(url, client.WithConnectOptions(connect.WithInterceptors(picks.interceptor())))
	for _, count := range cfg.counts {
		runtime.GC()
		pool := fmt.Sprintf("bench-%s-%s-c%d", stamp, backend, count)
		r := taskRun(ctx, cfg, c.Tasks(), backend, pool, count)
		r.Target = "service/" + backend
		out = append(out, r)
		fmt.Fprintf(stderr, "bench: %s count %d: %.0f tasks/s\n", r.Target, count, r.TasksPerSec)
	}
	if cfg.work && ctx.Err() == nil {
		runtime.GC()
		batch := min(slices.Max(cfg.counts), cfg.workers)
		pool := fmt.Sprintf("bench-%s-%s-work", stamp, backend)
		r := taskWorkRun(ctx, cfg, c, &picks, backend, pool, batch)
		r.Target = "work/" + backend
		out = append(out, r)
		fmt.Fprintf(stderr, "bench: %s batch %d: %.0f tasks/s\n", r.Target, batch, r.TasksPerSec)
	}
	if cfg.unique && ctx.Err() == nil {
		r := uniquePutRun(ctx, cfg, c.Tasks(), backend, fmt.Sprintf("bench-%s-%s-unique", stamp, backend))
		r.Target = "unique-put/" + backend
		out = append(out, r)
		fmt.Fprintf(stderr, "bench: %s: %.0f puts/s\n", r.Target, r.PutPerSec)
	}
	// SQLite's store is a file of one service's own: two services cannot share it.
	if cfg.rate > 0 && backend != "sqlite" && ctx.Err() == nil {
		r, err := benchRateBackend(ctx, cfg, url, backend, stamp, stderr)
		out = append(out, r)
		if err != nil {
			return out, errors.Join(err, stop())
		}
	}
	return out, stop()
}

// startTaskService serves a task service on backend in-process on a loopback port, opened
// by taskpickservice.Open as `coord serve` opens it: the bench only supplies the connection
// (Deps) the backend needs and what deletes the run's tasks afterwards. It returns the base
// URL and the function that stops the service, deletes the run's tasks and keys, and closes
// what it opened.
func startTaskService(ctx context.Context, cfg taskBenchConfig, backend, stamp string) (string, func() error, error) {
	var closers service.Closers
	quiet := slog.New(slog.DiscardHandler)
	dir, err := os.MkdirTemp("", "coord-bench-task-")
	if err != nil {
		return "", nil, fmt.Errorf("bench: %w", err)
	}
	closers.Add(func() error { return os.RemoveAll(dir) })
	deps := service.Deps{Logger: quiet, DataDir: dir, SQLiteSynchronous: cfg.sqliteSync}
	if err := taskBenchDeps[backend](ctx, cfg, stamp, &deps, &closers); err != nil {
		return "", nil, closers.Fail(err)
	}
	srv := server.New(server.Config{Logger: quiet})
	deps.HandlerOptions = srv.HandlerOptions()
	m, err := taskpickservice.Open(ctx, deps, taskpickservice.Config{Default: backend})
	if err != nil {
		return "", nil, closers.Fail(fmt.Errorf("bench: %s: %w", backend, err))
	}
	closers.Add(m.Close)
	srv.Handle(m.Path, m.Handler)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, closers.Fail(fmt.Errorf("bench: %w", err))
	}
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(serveCtx, ln) }()
	stop := func() error {
		cancel()
		return errors.Join(<-errc, closers.Close())
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// taskBenchDeps gives the connection each of taskpickservice.Backends needs to deps, with
// a closer that deletes what a run left behind; a backend missing here fails
// TestTaskBenchCoversEveryBackend.
var taskBenchDeps = map[string]func(ctx context.Context, cfg taskBenchConfig, stamp string, deps *service.Deps, closers *service.Closers) error{
	"sqlite": func(context.Context, taskBenchConfig, string, *service.Deps, *service.Closers) error {
		return nil // always opened, in deps.DataDir, removed with it
	},
	"redis": func(ctx context.Context, cfg taskBenchConfig, stamp string, deps *service.Deps, closers *service.Closers) error {
		rdb := redis.NewClient(&redis.Options{Addr: cfg.redisAddr, PoolSize: 256, MaxRetries: -1})
		closers.Add(rdb.Close)
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("bench: --redis-addr %s: %w", cfg.redisAddr, err)
		}
		closers.Add(func() error { return deleteRedisPools(context.WithoutCancel(ctx), rdb, "bench-"+stamp+"-") })
		deps.Redis = rdb
		return nil
	},
	"mysql": func(ctx context.Context, cfg taskBenchConfig, stamp string, deps *service.Deps, closers *service.Closers) error {
		db, err := sqldb.OpenMySQL(ctx, cfg.mysqlDSN, 32)
		if err != nil {
			return fmt.Errorf("bench: --mysql-dsn: %w", err)
		}
		closers.Add(db.Close)
		closers.Add(func() error { // a run that failed midway leaves rows behind
			_, err := db.ExecContext(context.WithoutCancel(ctx), "DELETE FROM coordkit_tasks WHERE pool LIKE ?", "bench-"+stamp+"-%")
			if err == nil {
				_, err = db.ExecContext(context.WithoutCancel(ctx), "DELETE FROM coordkit_task_unique WHERE pool LIKE ?", "bench-"+stamp+"-%")
			}
			return err
		})
		deps.MySQL = db
		return nil
	},
	"postgres": func(ctx context.Context, cfg taskBenchConfig, stamp string, deps *service.Deps, closers *service.Closers) error {
		schema := "coordkit_bench_" + stamp
		db, err := sqldb.OpenPostgres(ctx, cfg.postgresURL, sqldb.PostgresConfig{Schema: schema, MaxConns: 32})
		if err != nil {
			return fmt.Errorf("bench: --postgres-url: %w", err)
		}
		closers.Add(db.Close)
		closers.Add(func() error { // the run's own schema, with whatever a failed run left
			// IF EXISTS: a rate run's second service drops it too.
			_, err := db.ExecContext(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+sqldb.QuoteIdent(schema)+" CASCADE")
			return err
		})
		deps.Postgres = db
		return nil
	},
}

// deleteRedisPools deletes the keys of every pool whose name starts with poolPrefix, under
// the task backend's key prefix (a run that failed midway leaves tasks behind), and takes
// the pools off the backend's pools hash.
func deleteRedisPools(ctx context.Context, rdb *redis.Client, poolPrefix string) error {
	iter := rdb.Scan(ctx, 0, redistask.DefaultPrefix+":{*}:*"+poolPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			return err
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	pools := redistask.DefaultPrefix + ":pools"
	names, err := rdb.HKeys(ctx, pools).Result()
	if err != nil {
		return err
	}
	for _, m := range names {
		if strings.HasPrefix(m, poolPrefix) {
			if err := rdb.HDel(ctx, pools, m).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// taskErrors counts a run's errors, keeping the first.
type taskErrors struct {
	n     atomic.Int64
	mu    sync.Mutex
	first error
}

func (e *taskErrors) add(err error) {
	if e.n.Add(1) == 1 {
		e.mu.Lock()
		e.first = err
		e.mu.Unlock()
	}
}

func (e *taskErrors) into(r *taskResult) {
	r.Errors = int(e.n.Load())
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.first != nil {
		r.FirstError = e.first.Error()
	}
}

// putTasks puts n no-op tasks into pool in batches of taskpick.MaxPutTasks, from the workers
// at once, and returns how long it took.
func putTasks(ctx context.Context, cfg taskBenchConfig, tasks taskpickv1connect.TaskPickServiceClient, backend, pool string, errs *taskErrors) time.Duration {
	batches := make(chan *taskpickv1.PutRequest)
	go func() {
		defer close(batches)
		for from := 0; from < cfg.tasks; from += taskpick.MaxPutTasks {
			req := &taskpickv1.PutRequest{Backend: backend, Pool: pool}
			for i := from; i < min(from+taskpick.MaxPutTasks, cfg.tasks); i++ {
				req.Tasks = append(req.Tasks, &taskpickv1.NewTask{Id: "t" + strconv.Itoa(i)})
			}
			select {
			case batches <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	for range cfg.workers {
		wg.Go(func() {
			for req := range batches {
				if _, err := tasks.Put(ctx, req); err != nil {
					errs.add(fmt.Errorf("put: %w", err))
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// taskRun puts cfg.tasks tasks, then has cfg.workers goroutines pick count at a time and ack
// each until every task was picked. tasks/s is over the pick-and-ack phase.
func taskRun(ctx context.Context, cfg taskBenchConfig, tasks taskpickv1connect.TaskPickServiceClient, backend, pool string, count int) taskResult {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	r := taskResult{Count: count}
	var errs taskErrors
	putTook := putTasks(ctx, cfg, tasks, backend, pool, &errs)

	var picked, acked atomic.Int64
	lat := make([][]time.Duration, cfg.workers)
	ttl := durationpb.New(taskBenchTTL)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range cfg.workers {
		wg.Go(func() {
			failures := 0
			for ctx.Err() == nil && picked.Load() < int64(cfg.tasks) && failures < 100 {
				t0 := time.Now()
				res, err := tasks.Pick(ctx, &taskpickv1.PickRequest{Backend: backend, Pool: pool, Count: uint32(count), Ttl: ttl})
				if err != nil {
					failures++
					errs.add(fmt.Errorf("pick: %w", err))
					continue
				}
				if len(res.GetTasks()) == 0 { // the rest are being picked by the others
					time.Sleep(time.Millisecond)
					continue
				}
				lat[w] = append(lat[w], time.Since(t0))
				picked.Add(int64(len(res.GetTasks())))
				for _, t := range res.GetTasks() {
					_, err := tasks.Ack(ctx, &taskpickv1.AckRequest{Backend: backend, Pool: pool, Id: t.GetId(), LeaseToken: t.GetLeaseToken(), LeaseSecret: t.GetLeaseSecret()})
					if err != nil {
						failures++
						errs.add(fmt.Errorf("ack: %w", err))
						continue
					}
					acked.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	r.Tasks = int(acked.Load())
	r.PutPerSec = float64(cfg.tasks) / putTook.Seconds()
	r.TasksPerSec = float64(r.Tasks) / took.Seconds()
	all := slices.Concat(lat...)
	slices.Sort(all)
	r.PickP50, r.PickP99 = percentile(all, 0.50), percentile(all, 0.99)
	errs.into(&r)
	return r
}

// taskWorkRun puts cfg.tasks tasks and runs them through the SDK's Work with cfg.workers
// handlers, batch tasks per Pick, until every task was handled and acked.
func taskWorkRun(ctx context.Context, cfg taskBenchConfig, c *client.Client, picks *pickTimes, backend, pool string, batch int) taskResult {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	r := taskResult{Count: batch}
	var errs taskErrors
	putTook := putTasks(ctx, cfg, c.Tasks(), backend, pool, &errs)

	workCtx, stop := context.WithCancel(ctx)
	defer stop()
	var handled atomic.Int64
	handler := func(context.Context, *client.Task) error {
		if handled.Add(1) == int64(cfg.tasks) {
			stop() // the last handler: Work acks what is still running, then returns
		}
		return nil
	}
	var stats client.WorkStats
	picks.reset()
	start := time.Now()
	err := c.Work(workCtx, pool, handler, client.WithTaskBackend(backend), client.WithConcurrency(cfg.workers),
		client.WithBatch(batch), client.WithLeaseTTL(taskBenchTTL), client.WithWorkStats(&stats))
	took := time.Since(start)
	if err != nil {
		errs.add(fmt.Errorf("work: %w", err))
	}
	if n := stats.PickErrors.Load() + stats.FinishErrors.Load() + stats.LeasesLost.Load(); n > 0 {
		errs.add(fmt.Errorf("work: %d pick errors, %d finish errors, %d leases lost", stats.PickErrors.Load(), stats.FinishErrors.Load(), stats.LeasesLost.Load()))
	}
	r.Tasks = int(stats.Acked.Load())
	r.PutPerSec = float64(cfg.tasks) / putTook.Seconds()
	r.TasksPerSec = float64(r.Tasks) / took.Seconds()
	all := picks.sorted()
	r.PickP50, r.PickP99 = percentile(all, 0.50), percentile(all, 0.99)
	errs.into(&r)
	return r
}

// pickTimes records how long the Picks that returned tasks took, through a client
// interceptor, for the runs that do not call Pick themselves (Work).
type pickTimes struct {
	mu  sync.Mutex
	all []time.Duration
}

func (p *pickTimes) interceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().Procedure != taskpickv1connect.TaskPickServicePickProcedure {
				return next(ctx, req)
			}
			start := time.Now()
			res, err := next(ctx, req)
			if err == nil {
				if pr, ok := res.Any().(*taskpickv1.PickResponse); ok && len(pr.GetTasks()) > 0 {
					d := time.Since(start)
					p.mu.Lock()
					p.all = append(p.all, d)
					p.mu.Unlock()
				}
			}
			return res, err
		}
	}
}

func (p *pickTimes) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.all = nil
}

func (p *pickTimes) sorted() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := slices.Clone(p.all)
	slices.Sort(out)
	return out
}

// benchAsynq enqueues cfg.tasks no-op tasks with hibiken/asynq into Redis database
// cfg.asynqDB (flushed before and after), then processes them with an asynq server of
// concurrency cfg.workers. tasks/s is over the processing, from the server's start to the
// last handler's return.
func benchAsynq(ctx context.Context, cfg taskBenchConfig) (taskResult, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	r := taskResult{Target: "asynq/redis", Count: 1}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.redisAddr, DB: cfg.asynqDB})
	defer rdb.Close()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		return r, fmt.Errorf("bench: asynq: flush Redis db %d: %w", cfg.asynqDB, err)
	}
	defer rdb.FlushDB(context.WithoutCancel(ctx))
	opt := asynq.RedisClientOpt{Addr: cfg.redisAddr, DB: cfg.asynqDB, PoolSize: max(cfg.workers, 10)}
	cl := asynq.NewClient(opt)
	defer cl.Close()

	var errs taskErrors
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range cfg.workers {
		wg.Go(func() {
			for next.Add(1) <= int64(cfg.tasks) && ctx.Err() == nil {
				if _, err := cl.EnqueueContext(ctx, asynq.NewTask("bench:noop", nil)); err != nil {
					errs.add(fmt.Errorf("enqueue: %w", err))
				}
			}
		})
	}
	wg.Wait()
	r.PutPerSec = float64(cfg.tasks) / time.Since(start).Seconds()

	var handled atomic.Int64
	finished := make(chan struct{})
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: cfg.workers, LogLevel: asynq.ErrorLevel})
	start = time.Now()
	err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if handled.Add(1) == int64(cfg.tasks) {
			close(finished)
		}
		return nil
	}))
	if err != nil {
		return r, fmt.Errorf("bench: asynq: start server: %w", err)
	}
	select {
	case <-finished:
	case <-ctx.Done():
		errs.add(fmt.Errorf("asynq: %d of %d tasks handled: %w", handled.Load(), cfg.tasks, context.Cause(ctx)))
	}
	took := time.Since(start)
	srv.Shutdown()
	r.Tasks = int(min(handled.Load(), int64(cfg.tasks)))
	r.TasksPerSec = float64(r.Tasks) / took.Seconds()
	errs.into(&r)
	return r, nil
}

// addAsynqRatios sets every service and Work run's ratio: its tasks/s over asynq's.
func addAsynqRatios(results []taskResult) {
	addRatios(results, "asynq/redis", func(r *taskResult, ratio float64) { r.Ratio = ratio })
}

// addRatios sets, with set, every run's tasks/s over that of the run of target, if any;
// not a rate run's, whose tasks/s is its limit's.
func addRatios(results []taskResult, target string, set func(r *taskResult, ratio float64)) {
	i := slices.IndexFunc(results, func(r taskResult) bool { return r.Target == target })
	if i < 0 || results[i].TasksPerSec == 0 {
		return
	}
	base := results[i].TasksPerSec
	for j := range results {
		if results[j].RateLimit > 0 {
			continue
		}
		set(&results[j], results[j].TasksPerSec/base)
	}
}

// writeTaskReport prints one row per run, or the runs as JSON.
func writeTaskReport(w io.Writer, results []taskResult, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Results []taskResult `json:"results"`
		}{results}); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		return nil
	}
	return writeTables(w, taskTable(results))
}

// taskTable is the table of `coordbench task`: one row per run.
func taskTable(results []taskResult) benchTable {
	t := benchTable{header: []string{"target", "count", "tasks", "put/s", "tasks/s", "vs asynq", "pick p50", "pick p99", "errors"}}
	for _, r := range results {
		ratio, p50, p99 := "-", "-", "-"
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		if r.PickP50 > 0 {
			p50, p99 = fmtLatency(r.PickP50), fmtLatency(r.PickP99)
		}
		t.rows = append(t.rows, []string{r.Target, strconv.Itoa(r.Count), strconv.Itoa(r.Tasks), fmt.Sprintf("%.0f", r.PutPerSec),
			fmt.Sprintf("%.0f", r.TasksPerSec), ratio, p50, p99, strconv.Itoa(r.Errors)})
	}
	return t
}
