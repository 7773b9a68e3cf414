// Command nullservice measures the ceiling of the SDK -> service hop: the coordkit SDK
// (libs/client, batching on, as `coordbench lock` uses it) against a Connect LockService in
// a process of its own whose Acquire, Release and Batch do nothing but answer, next to
// go-redsync on a real Redis in the same run. Whatever a real service does (Redis, SQL,
// events, metrics) comes on top of this hop, in series: in a closed loop of N callers,
// pairs/s = N / (latency of a pair), and a pair through the service takes at least this
// hop's latency plus the backend's round trip. So if the null service is not clearly faster
// than redsync at N clients, no service behind Connect over HTTP can reach redsync at N
// clients on this machine. With -redis-step the service first runs, per request, the Redis
// commands redsync sends for its operations (SET NX PX, a compare-and-delete script) as one
// pipeline: the least backend work a service could add, and so a ceiling for any real one.
// Its results are in docs/benchmarks.md, "Batching: what was measured while designing it".
//
//	go run ./tools/bench/experiments/nullservice -clients 1,16,64 [-redis-step]
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	goredsync "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1/lockv1connect"
)

// null answers every operation at once, as a real service answers an uncontended pair;
// with rdb set it first runs the Redis commands redsync would (step).
type null struct {
	lockv1connect.UnimplementedLockServiceHandler
	rdb *redis.Client
}

const owner = "0123456789abcdef0123456789abcdef"

// releaseScript is redsync's release: delete the key only while it holds our value.
var releaseScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)

// step runs, when n.rdb is set, what redsync sends for each operation (SET NX PX for an
// acquire, the compare-and-delete script for a release) as one pipeline for all of them: the
// least Redis work a service could do for them, in one round trip.
func (n null) step(ctx context.Context, keys []string, acquire []bool) error {
	if n.rdb == nil {
		return nil
	}
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			if acquire[i] {
				p.SetNX(ctx, k, owner, 10*time.Second)
			} else {
				releaseScript.EvalSha(ctx, p, []string{k}, owner)
			}
		}
		return nil
	})
	return err
}

func acquired(key string) *lockv1.AcquireResponse {
	return &lockv1.AcquireResponse{Acquired: true, Lease: &lockv1.Lease{
		Key: key, Backend: "null", Owner: owner, FencingToken: 1, HoldCount: 1,
	}}
}

func (n null) Acquire(ctx context.Context, r *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	if err := n.step(ctx, []string{r.GetKey()}, []bool{true}); err != nil {
		return nil, err
	}
	return acquired(r.GetKey()), nil
}

func (n null) Release(ctx context.Context, r *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	if err := n.step(ctx, []string{r.GetKey()}, []bool{false}); err != nil {
		return nil, err
	}
	return &lockv1.ReleaseResponse{Released: true}, nil
}

func (n null) Batch(ctx context.Context, r *lockv1.BatchRequest) (*lockv1.BatchResponse, error) {
	ops := r.GetOperations()
	keys, acquire := make([]string, len(ops)), make([]bool, len(ops))
	out := make([]*lockv1.BatchResult, len(ops))
	for i, op := range ops {
		if a := op.GetAcquire(); a != nil {
			keys[i], acquire[i] = a.GetKey(), true
			out[i] = &lockv1.BatchResult{Result: &lockv1.BatchResult_Acquire{Acquire: acquired(a.GetKey())}}
		} else {
			keys[i] = op.GetRelease().GetKey()
			out[i] = &lockv1.BatchResult{Result: &lockv1.BatchResult_Release{Release: &lockv1.ReleaseResponse{Released: true}}}
		}
	}
	if err := n.step(ctx, keys, acquire); err != nil {
		return nil, err
	}
	return &lockv1.BatchResponse{Results: out}, nil
}

// cpu is a process's user + system time so far.
func cpu(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	u, _ := strconv.Atoi(f[11])
	k, _ := strconv.Atoi(f[12])
	return time.Duration(u+k) * 10 * time.Millisecond
}

type result struct {
	pairsPerSec     float64
	p50             time.Duration
	client, service time.Duration // CPU per pair
}

// run calls pair from n goroutines for warm-up + d and measures the window d.
func run(n int, d time.Duration, servicePID int, pair func(ctx context.Context, key string) error) result {
	ctx := context.Background()
	from := time.Now().Add(time.Second)
	end := from.Add(d)
	lat := make([][]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		key := fmt.Sprintf("nullservice:%d", i)
		wg.Go(func() {
			for {
				start := time.Now()
				if !start.Before(end) {
					return
				}
				if err := pair(ctx, key); err != nil {
					panic(err)
				}
				if done := time.Now(); !start.Before(from) && done.Before(end) {
					lat[i] = append(lat[i], done.Sub(start))
				}
			}
		})
	}
	time.Sleep(time.Until(from))
	c0, s0 := cpu(os.Getpid()), cpu(servicePID)
	time.Sleep(time.Until(end))
	c1, s1 := cpu(os.Getpid()), cpu(servicePID)
	wg.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	r := result{pairsPerSec: float64(len(all)) / d.Seconds()}
	if len(all) > 0 {
		r.p50 = all[len(all)/2]
		r.client = (c1 - c0) / time.Duration(len(all))
		r.service = (s1 - s0) / time.Duration(len(all))
	}
	return r
}

// waitListening waits until addr accepts connections (the child has started), at most 10 s.
func waitListening(addr string) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			panic(err)
		}
	}
}

func main() {
	serve := flag.String("serve", "", "serve the null service on this address (the child process)")
	clientList := flag.String("clients", "1,16,64", "comma-separated numbers of clients")
	d := flag.Duration("d", 3*time.Second, "measured window of each run")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis for redsync")
	redisStep := flag.Bool("redis-step", false, "the null service runs redsync's Redis commands for each operation, one pipeline per request")
	flag.Parse()
	if *serve != "" {
		var n null
		if *redisStep {
			n.rdb = redis.NewClient(&redis.Options{Addr: *redisAddr, PoolSize: 128})
			// EVALSHA in a pipeline is not retried as EVAL: the script must be in Redis first.
			if err := releaseScript.Load(context.Background(), n.rdb).Err(); err != nil {
				panic(err)
			}
		}
		mux := http.NewServeMux()
		mux.Handle(lockv1connect.NewLockServiceHandler(n))
		ln, err := net.Listen("tcp", *serve)
		if err != nil {
			panic(err)
		}
		panic(http.Serve(ln, mux))
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	child := exec.Command(os.Args[0], "-serve", addr, "-redis", *redisAddr, fmt.Sprintf("-redis-step=%v", *redisStep))
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		panic(err)
	}
	defer child.Process.Kill()
	waitListening(addr)

	sdk := client.New("http://" + addr)
	nullPair := func(ctx context.Context, key string) error {
		if _, err := sdk.Locks().Acquire(ctx, &lockv1.AcquireRequest{Key: key}); err != nil {
			return err
		}
		_, err := sdk.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: owner})
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, PoolSize: 128})
	defer rdb.Close()
	rs := redsync.New(goredsync.NewPool(rdb))
	redsyncPair := func(ctx context.Context, key string) error {
		// as tools/bench/benchlock.go's openRedsync, with its benchTTL
		m := rs.NewMutex(key, redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		_, err := m.UnlockContext(ctx)
		return err
	}

	label := "null"
	if *redisStep {
		label = "null+redis"
	}
	fmt.Printf("%-10s %7s %10s %9s %12s %12s\n", "target", "clients", "pairs/s", "p50", "cpu client", "cpu service")
	for _, s := range strings.Split(*clientList, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			panic(err)
		}
		nr := run(n, *d, child.Process.Pid, nullPair)
		rr := run(n, *d, 0, redsyncPair)
		fmt.Printf("%-10s %7d %10.0f %9v %12v %12v\n", label, n, nr.pairsPerSec, nr.p50, nr.client, nr.service)
		fmt.Printf("%-10s %7d %10.0f %9v %12v %12s\n", "redsync", n, rr.pairsPerSec, rr.p50, rr.client, "-")
		fmt.Printf("ratio %s ÷ redsync at %d clients: pairs/s %.2f\n", label, n, nr.pairsPerSec/rr.pairsPerSec)
	}
}
