package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	goredsync "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/config"
	"github.com/coordkit/coordkit/libs/event"
)

// contendPeer is the library every service target of `coordbench contend` is compared with.
const contendPeer = targetRedsync

// contendStartTimeout bounds starting one target (its service instances or its Redis
// connection), so that a backend that is down is skipped instead of waited for.
const contendStartTimeout = 15 * time.Second

// Fair targets of `coordbench contend`: their service target with every Acquire fair.
const (
	targetServiceRedisFair    = targetServiceRedis + fairSuffix
	targetServiceMySQLFair    = targetServiceMySQL + fairSuffix
	targetServicePostgresFair = targetServicePostgres + fairSuffix
	targetServiceSQLiteFair   = targetServiceSQLite + fairSuffix
)

// fairSuffix ends the name of a target whose Acquires set AcquireRequest.Fair.
const fairSuffix = "/fair"

// redsyncMinDelay is go-redsync's shortest default pause between two tries (50–250ms).
const redsyncMinDelay = 50 * time.Millisecond

// contendConfig is everything `coordbench contend` can be told.
type contendConfig struct {
	targets   []string
	explicit  bool // --targets was given: a target that cannot start is an error, not skipped
	clients   int
	instances int
	hold      time.Duration
	wait      time.Duration
	duration  time.Duration
	warmup    time.Duration
	redisAddr string
	redlock   []string
	zkAddrs   []string
	mysqlDSN  string
	pgURL     string
	asJSON    bool
	coord     string // the coord binary of the instances; empty: built (see coordBinary)
}

// contendTargets lists every target of `coordbench contend` in the order they run, each
// fair target right after its non-fair one.
func contendTargets() []string {
	return []string{
		targetServiceRedis, targetServiceRedisFair, targetRedsync, targetServiceRedlock,
		targetServiceZooKeeper, targetServiceMySQL, targetServiceMySQLFair,
		targetServicePostgres, targetServicePostgresFair,
		targetServiceSQLite, targetServiceSQLiteFair,
	}
}

// contendBackend returns the service target's plain target (service/<backend>), its backend
// name, and whether its Acquires are fair.
func contendBackend(target string) (plain, backend string, fair bool) {
	plain, fair = strings.CutSuffix(target, fairSuffix)
	return plain, strings.TrimPrefix(plain, "service/"), fair
}

// benchContendFlags adds the flags of `coordbench contend` to fs and returns the function
// that checks them, after parsing, into a config.
func benchContendFlags(fs *pflag.FlagSet) func() (contendConfig, error) {
	var cfg contendConfig
	targets := fs.String("targets", strings.Join(contendTargets(), ","), "comma-separated targets to measure; by default those whose backend answers")
	fs.IntVar(&cfg.clients, "clients", 16, "clients contending for the one key")
	fs.IntVar(&cfg.instances, "instances", 2, "service instances the clients are spread over (round robin)")
	fs.DurationVar(&cfg.hold, "hold", 200*time.Microsecond, "how long each client holds the lock once it has it")
	fs.DurationVar(&cfg.wait, "wait", 30*time.Second, "how long one Acquire waits for the lock (server side; redsync: keeps retrying)")
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "measured length of each run")
	fs.DurationVar(&cfg.warmup, "warmup", time.Second, "unmeasured warm-up before each run")
	fs.StringVar(&cfg.redisAddr, "redis-addr", "127.0.0.1:6379", "Redis host:port for redsync/redis and service/redis")
	redlockAddrs := fs.String("redlock-addrs", "127.0.0.1:6380,127.0.0.1:6381,127.0.0.1:6382", "Redlock nodes for service/redlock")
	zkAddrs := fs.String("zk-addrs", "127.0.0.1:2181", "ZooKeeper for service/zookeeper")
	fs.StringVar(&cfg.mysqlDSN, "mysql-dsn", "root@tcp(127.0.0.1:3306)/coordkit", "MySQL/MariaDB for service/mysql")
	postgresURLFlag(fs, &cfg.pgURL)
	fs.BoolVar(&cfg.asJSON, "json", false, "print the results as JSON instead of a table")
	coordFlag(fs, &cfg.coord)
	return func() (contendConfig, error) {
		cfg.explicit = fs.Changed("targets")
		return cfg.check(*targets, *redlockAddrs, *zkAddrs)
	}
}

// check completes cfg with the list flags and checks it.
func (cfg contendConfig) check(targets, redlockAddrs, zkAddrs string) (contendConfig, error) {
	cfg.redlock, cfg.zkAddrs = splitList(redlockAddrs), splitList(zkAddrs)
	for item := range strings.SplitSeq(targets, ",") {
		name := strings.TrimSpace(item)
		if !slices.Contains(contendTargets(), name) {
			return cfg, fmt.Errorf("bench contend: --targets: unknown target %q (known: %s)", name, strings.Join(contendTargets(), ", "))
		}
		if !slices.Contains(cfg.targets, name) {
			cfg.targets = append(cfg.targets, name)
		}
	}
	switch {
	case cfg.clients < 1:
		return cfg, fmt.Errorf("bench contend: --clients %d must be positive", cfg.clients)
	case cfg.instances < 1:
		return cfg, fmt.Errorf("bench contend: --instances %d must be positive", cfg.instances)
	case cfg.hold < 0:
		return cfg, fmt.Errorf("bench contend: --hold %v must not be negative", cfg.hold)
	case cfg.wait <= 0:
		return cfg, fmt.Errorf("bench contend: --wait %v must be positive", cfg.wait)
	case cfg.duration <= 0:
		return cfg, fmt.Errorf("bench contend: --duration %v must be positive", cfg.duration)
	case cfg.warmup < 0:
		return cfg, fmt.Errorf("bench contend: --warmup %v must not be negative", cfg.warmup)
	}
	return cfg, nil
}

// benchContend implements `coordbench contend`: clients spread over service instances all
// take turns on ONE key (acquire with a server-side wait, hold, release), on every selected
// target one after another (a …/fair target acquires in fair mode), and it prints handoffs/s,
// the wait to get the lock, how evenly the clients were served, errors and any breach of
// mutual exclusion, next to go-redsync polling the same Redis.
func benchContend(ctx context.Context, cfg contendConfig, stdout, stderr io.Writer) error {
	results, err := measureContention(ctx, cfg, stderr)
	if werr := writeContendReport(stdout, results, cfg.asJSON); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// measureContention runs every target of cfg, one after another; the results are those of
// the targets that ran, even when it also returns an error.
func measureContention(ctx context.Context, cfg contendConfig, stderr io.Writer) ([]contendResult, error) {
	warn := func(msg string) { fmt.Fprintln(stderr, msg) }
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	var results []contendResult
	var errs []error
	for _, target := range cfg.targets {
		key := fmt.Sprintf("bench-contend:%s:%016x", stamp, rand.Uint64())
		startCtx, cancel := context.WithTimeout(ctx, contendStartTimeout)
		locks, stop, err := openContendTarget(startCtx, ctx, cfg, target, key, warn)
		cancel()
		if ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("bench contend: %w", context.Cause(ctx)))
			break
		}
		if err != nil {
			if cfg.explicit {
				errs = append(errs, fmt.Errorf("bench contend: %s: %w", target, err))
			} else {
				fmt.Fprintf(stderr, "bench contend: skipping %s (not available): %v\n", target, err)
			}
			continue
		}
		runtime.GC()
		r := runContention(ctx, locks, cfg.hold, cfg.warmup, cfg.duration, cfg.wait)
		r.Target, r.Clients = target, cfg.clients
		if isServiceTarget(target) {
			r.Instances = cfg.instances
		}
		if err := stop(); err != nil {
			errs = append(errs, fmt.Errorf("bench contend: %s: stop: %w", target, err))
		}
		if ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("bench contend: %w", context.Cause(ctx)))
			break
		}
		if r.Errors > 0 {
			fmt.Fprintf(stderr, "bench contend: %s: %d errors, first: %s\n", target, r.Errors, r.FirstError)
		}
		if r.Overlaps+r.StaleTokens > 0 {
			fmt.Fprintf(stderr, "bench contend: %s: MUTUAL EXCLUSION VIOLATED: %d overlaps, %d fencing tokens not above the previous holder's; first: %s\n",
				target, r.Overlaps, r.StaleTokens, r.FirstViolation)
		}
		results = append(results, r)
	}
	return results, errors.Join(errs...)
}

// contendLock acquires the benchmark's one lock, waiting for it, and returns the lease's
// fencing token (0 when the target has none) and the function that releases that lease.
type contendLock func(ctx context.Context) (token uint64, release func(context.Context) error, err error)

// openContendTarget prepares one target: one contendLock per client on key, and the
// function that closes what it opened. startCtx bounds the start; ctx is the program's.
func openContendTarget(startCtx, ctx context.Context, cfg contendConfig, target, key string, warn func(string)) ([]contendLock, func() error, error) {
	if target == targetRedsync {
		return openContendRedsync(startCtx, cfg, key)
	}
	urls, stop, err := startContendInstances(startCtx, ctx, cfg, target, warn)
	if err != nil {
		return nil, nil, err
	}
	_, backend, fair := contendBackend(target)
	clients := make([]*client.Client, len(urls))
	for i, u := range urls {
		clients[i] = client.New(u)
	}
	locks := make([]contendLock, cfg.clients)
	for i := range locks {
		locks[i] = serviceContendLock(clients[i%len(clients)], backend, fair, key, cfg.wait)
	}
	return locks, stop, nil
}

// startContendInstances starts cfg.instances instances of the service, each a coord serve
// child process of the --coord binary with the target's backend flags on its own loopback
// port, sharing one data directory (so that service/sqlite instances share one SQLite file)
// and one NATS: the first runs the embedded server and also listens on a loopback port, the
// others connect to it. It returns their base URLs and the function that stops them, last
// started first; warn is told what an instance logged.
func startContendInstances(startCtx, ctx context.Context, cfg contendConfig, target string, warn func(string)) ([]string, func() error, error) {
	exe, err := coordBinary(ctx, cfg.coord)
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "coord-contend-")
	if err != nil {
		return nil, nil, err
	}
	var stops []func() error
	stopAll := func() error {
		var errs []error
		for i := len(stops) - 1; i >= 0; i-- {
			errs = append(errs, stops[i]())
		}
		return errors.Join(append(errs, os.RemoveAll(dir))...)
	}
	common := []string{"serve", "--data-dir", dir, "--log-level", "warn"}
	var env []string // secrets go in the environment, not on a command line every user sees
	plain, _, _ := contendBackend(target)
	switch plain {
	case targetServiceRedis:
		common = append(common, "--redis-addr", cfg.redisAddr)
	case targetServiceRedlock:
		common = append(common, "--redlock-addrs", strings.Join(cfg.redlock, ","))
	case targetServiceZooKeeper:
		common = append(common, "--zk-addrs", strings.Join(cfg.zkAddrs, ","))
	case targetServiceMySQL:
		common = append(common, "--lock-scope", "bench")
		env = append(env, config.EnvName("mysql-dsn")+"="+cfg.mysqlDSN)
	case targetServicePostgres:
		common = append(common, "--lock-scope", "bench")
		env = append(env, config.EnvName("postgres-url")+"="+cfg.pgURL)
	}
	var natsAddr string
	if cfg.instances > 1 {
		if natsAddr, err = freeLoopbackAddr(); err != nil {
			return nil, nil, errors.Join(err, stopAll())
		}
	}
	var urls []string
	for i := range cfg.instances {
		args, ienv := slices.Clone(common), slices.Clone(env)
		switch {
		case natsAddr == "":
		case i == 0:
			args = append(args, "--nats-listen", natsAddr)
		default:
			// The others log in as the publisher instance 0 generated into the data dir,
			// and sign with its events key.
			auth, err := event.LoadAuth(filepath.Join(dir, natsUsersFileName))
			if err != nil {
				return nil, nil, errors.Join(err, stopAll())
			}
			args = append(args, "--nats-url", "nats://"+natsAddr, "--nats-user", auth.Publisher.User,
				"--events-key-file", filepath.Join(dir, eventsKeyFileName))
			ienv = append(ienv, config.EnvName("nats-password")+"="+auth.Publisher.Password)
		}
		p, err := startServeArgs(startCtx, ctx, exe, func(addr string) ([]string, []string) {
			return append(slices.Clone(args), "--addr", addr), ienv
		}, warn)
		if err != nil {
			return nil, nil, errors.Join(fmt.Errorf("instance %d: %w", i, err), stopAll())
		}
		urls = append(urls, p.url)
		stops = append(stops, func() error {
			err := p.stop()
			if out := p.out.String(); err == nil && out != "" {
				warn(fmt.Sprintf("bench contend: instance %d logged: %s", i, out))
			}
			return err
		})
	}
	return urls, stopAll, nil
}

// The files `coord serve --nats-listen` generates into its data directory when missing: the
// embedded NATS server's users, and the key that signs events.
const (
	natsUsersFileName = "nats-users"
	eventsKeyFileName = "events.key"
)

// freeLoopbackAddr returns a loopback host:port that nobody listened on a moment ago.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// serviceContendLock acquires key through the service with a server-side wait, in fair mode
// when fair is set, and releases exactly the lease it got (owner and fencing token).
func serviceContendLock(c *client.Client, backend string, fair bool, key string, wait time.Duration) contendLock {
	ttl, waitpb := durationpb.New(benchTTL), durationpb.New(wait)
	return func(ctx context.Context) (uint64, func(context.Context) error, error) {
		res, err := c.Locks().Acquire(ctx, &lockv1.AcquireRequest{Key: key, Backend: backend, Ttl: ttl, Wait: waitpb, Fair: fair})
		if err != nil {
			return 0, nil, fmt.Errorf("acquire: %w", err)
		}
		if !res.GetAcquired() {
			return 0, nil, fmt.Errorf("acquire: not acquired within %v (holder's token %d)", wait, res.GetHolder().GetFencingToken())
		}
		lease := res.GetLease()
		release := func(ctx context.Context) error {
			rel, err := c.Locks().Release(ctx, &lockv1.ReleaseRequest{
				Key: key, Backend: backend, Owner: lease.GetOwner(), FencingToken: lease.GetFencingToken(),
			})
			if err != nil {
				return fmt.Errorf("release token %d: %w", lease.GetFencingToken(), err)
			}
			if !rel.GetReleased() || rel.GetHoldCount() != 0 {
				return fmt.Errorf("release token %d: released=%v, %d holds left; want released, 0 left",
					lease.GetFencingToken(), rel.GetReleased(), rel.GetHoldCount())
			}
			return nil
		}
		return lease.GetFencingToken(), release, nil
	}
}

// openContendRedsync connects to Redis and returns, per client, go-redsync locking key the
// way an application polls: LockContext with its default pause of 50–250ms between tries,
// as many tries as fit in the wait, and the wait as LockContext's deadline.
func openContendRedsync(startCtx context.Context, cfg contendConfig, key string) ([]contendLock, func() error, error) {
	rdb := redis.NewClient(&redis.Options{Addr: cfg.redisAddr, PoolSize: max(cfg.clients, 10)})
	if err := rdb.Ping(startCtx).Err(); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("redsync node %s: %w", cfg.redisAddr, err), rdb.Close())
	}
	rs := redsync.New(goredsync.NewPool(rdb))
	tries := max(int(cfg.wait/redsyncMinDelay), 1)
	lk := func(ctx context.Context) (uint64, func(context.Context) error, error) {
		m := rs.NewMutex(key, redsync.WithExpiry(benchTTL), redsync.WithTries(tries))
		wctx, cancel := context.WithTimeout(ctx, cfg.wait)
		err := m.LockContext(wctx)
		cancel()
		if err != nil {
			return 0, nil, fmt.Errorf("lock: %w", err)
		}
		release := func(ctx context.Context) error {
			ok, err := m.UnlockContext(ctx)
			if err != nil {
				return fmt.Errorf("unlock: %w", err)
			}
			if !ok {
				return errors.New("unlock: not released")
			}
			return nil
		}
		return 0, release, nil
	}
	locks := make([]contendLock, cfg.clients)
	for i := range locks {
		locks[i] = lk
	}
	return locks, rdb.Close, nil
}

// exclusion watches mutual exclusion from outside the lock: holders counts the clients
// between "acquired" and "about to release" (more than one is an overlap), and every new
// holder's fencing token must be above the previous holder's.
type exclusion struct {
	holders     atomic.Int64
	lastToken   atomic.Uint64
	overlaps    atomic.Int64
	staleTokens atomic.Int64

	mu    sync.Mutex
	first string // the first violation, described
}

// enter records that a client now holds the lock with token (0: the target has no tokens).
func (x *exclusion) enter(client int, token uint64) {
	if n := x.holders.Add(1); n > 1 {
		x.overlaps.Add(1)
		x.note(fmt.Sprintf("client %d acquired (token %d) while %d other clients held the lock", client, token, n-1))
	}
	if token == 0 {
		return
	}
	if prev := x.lastToken.Swap(token); token <= prev {
		x.staleTokens.Add(1)
		x.note(fmt.Sprintf("client %d acquired with token %d after a holder with token %d", client, token, prev))
	}
}

// leave records that a client is about to release the lock.
func (x *exclusion) leave() { x.holders.Add(-1) }

func (x *exclusion) note(violation string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.first == "" {
		x.first = violation
	}
}

// contendClient is what one client measured.
type contendClient struct {
	waits    []time.Duration // of the acquisitions started inside the window
	handoffs int             // releases that completed inside the window
	errors   int
	firstErr error
}

// runContention runs one client per lock in locks, each taking the lock, holding it for
// hold and releasing it back to back, for warmup and then duration. A client stops starting
// acquisitions when the window closes; waits, shares and errors are those of the
// acquisitions started inside the window, even when they end after it, so a starved client
// is counted; handoffs are the releases that completed inside it. Violations count at any
// time.
func runContention(ctx context.Context, locks []contendLock, hold, warmup, duration, wait time.Duration) contendResult {
	from := time.Now().Add(warmup)
	end := from.Add(duration)
	runCtx, cancel := context.WithDeadline(ctx, end.Add(wait+drainTimeout))
	defer cancel()
	var x exclusion
	clients := make([]contendClient, len(locks))
	var wg sync.WaitGroup
	for i, lk := range locks {
		wg.Go(func() { clients[i] = contender(runCtx, i, lk, &x, hold, from, end) })
	}
	wg.Wait()
	return summarizeContention(clients, &x, duration)
}

// contender is one client's loop of runContention.
func contender(ctx context.Context, id int, lk contendLock, x *exclusion, hold time.Duration, from, end time.Time) contendClient {
	var c contendClient
	fail := func(inWindow bool, err error) {
		if !inWindow {
			return
		}
		c.errors++
		if c.firstErr == nil {
			c.firstErr = err
		}
	}
	for ctx.Err() == nil {
		start := time.Now()
		if !start.Before(end) {
			break
		}
		inWindow := !start.Before(from)
		token, release, err := lk(ctx)
		if err != nil {
			fail(inWindow, err)
			continue
		}
		acquired := time.Now()
		x.enter(id, token)
		holdFor(hold)
		x.leave()
		err = release(ctx)
		done := time.Now()
		if err != nil {
			fail(inWindow, err)
			continue
		}
		if inWindow {
			c.waits = append(c.waits, acquired.Sub(start))
		}
		if !done.Before(from) && !done.After(end) {
			c.handoffs++
		}
	}
	return c
}

// holdFor keeps the lock for d. Timers sleep at least about a millisecond on a busy Linux
// box, five times the default hold, so short holds spin, yielding to other goroutines.
func holdFor(d time.Duration) {
	if d >= 2*time.Millisecond {
		time.Sleep(d)
		return
	}
	for start := time.Now(); time.Since(start) < d; {
		runtime.Gosched()
	}
}
