// Command nullservice measures the ceiling of the SDK -> service hop: the coordkit SDK
// (libs/client, batching on, as `coord bench lock` uses it) against a Connect LockService in
// a process of its own whose Acquire, Release and Batch do nothing but answer, next to
// go-redsync on a real Redis in the same run. Whatever a real service does (Redis, SQL,
// events, metrics) comes on top of this hop, in series: in a closed loop of N callers,
// pairs/s = N / (latency of a pair), and a pair through the service takes at least this
// hop's latency plus the backend's round trip. So if the null service is not clearly faster
// than redsync at N clients, no service behind Connect over HTTP can reach redsync at N
// clients on this machine. It was written for issue 12; see "Batching" in
// docs/architecture.md.
//
//	GOWORK=off go run . -clients 1,16,64
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
	lockv1 "github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1/lockv1connect"
)

// null answers every operation at once, as a real service answers an uncontended pair.
type null struct {
	lockv1connect.UnimplementedLockServiceHandler
}

func acquired(key string) *lockv1.AcquireResponse {
	return &lockv1.AcquireResponse{Acquired: true, Lease: &lockv1.Lease{
		Key: key, Backend: "null", Owner: "0123456789abcdef0123456789abcdef", FencingToken: 1, HoldCount: 1,
	}}
}

func (null) Acquire(_ context.Context, r *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	return acquired(r.GetKey()), nil
}

func (null) Release(context.Context, *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	return &lockv1.ReleaseResponse{Released: true}, nil
}

func (null) Batch(_ context.Context, r *lockv1.BatchRequest) (*lockv1.BatchResponse, error) {
	out := make([]*lockv1.BatchResult, len(r.GetOperations()))
	for i, op := range r.GetOperations() {
		if a := op.GetAcquire(); a != nil {
			out[i] = &lockv1.BatchResult{Result: &lockv1.BatchResult_Acquire{Acquire: acquired(a.GetKey())}}
		} else {
			out[i] = &lockv1.BatchResult{Result: &lockv1.BatchResult_Release{Release: &lockv1.ReleaseResponse{Released: true}}}
		}
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

func main() {
	serve := flag.String("serve", "", "serve the null service on this address (the child process)")
	clientList := flag.String("clients", "1,16,64", "comma-separated numbers of clients")
	d := flag.Duration("d", 3*time.Second, "measured window of each run")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis for redsync")
	flag.Parse()
	if *serve != "" {
		mux := http.NewServeMux()
		mux.Handle(lockv1connect.NewLockServiceHandler(null{}))
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
	child := exec.Command(os.Args[0], "-serve", addr)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		panic(err)
	}
	defer child.Process.Kill()
	time.Sleep(500 * time.Millisecond)

	sdk := client.New("http://" + addr)
	nullPair := func(ctx context.Context, key string) error {
		if _, err := sdk.Locks().Acquire(ctx, &lockv1.AcquireRequest{Key: key}); err != nil {
			return err
		}
		_, err := sdk.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: "0123456789abcdef0123456789abcdef"})
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, PoolSize: 128})
	defer rdb.Close()
	rs := redsync.New(goredsync.NewPool(rdb))
	redsyncPair := func(ctx context.Context, key string) error {
		m := rs.NewMutex(key, redsync.WithExpiry(30*time.Second), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		_, err := m.UnlockContext(ctx)
		return err
	}

	fmt.Printf("%-8s %7s %10s %9s %12s %12s\n", "target", "clients", "pairs/s", "p50", "cpu client", "cpu service")
	for _, s := range strings.Split(*clientList, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			panic(err)
		}
		nr := run(n, *d, child.Process.Pid, nullPair)
		rr := run(n, *d, 0, redsyncPair)
		fmt.Printf("%-8s %7d %10.0f %9v %12v %12v\n", "null", n, nr.pairsPerSec, nr.p50, nr.client, nr.service)
		fmt.Printf("%-8s %7d %10.0f %9v %12v %12s\n", "redsync", n, rr.pairsPerSec, rr.p50, rr.client, "-")
		fmt.Printf("ratio null ÷ redsync at %d clients: pairs/s %.2f\n", n, nr.pairsPerSec/rr.pairsPerSec)
	}
}
