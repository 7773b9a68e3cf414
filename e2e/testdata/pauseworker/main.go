// Command pauseworker runs Work handlers that hold task leases and reports what the very
// first check of each handler says after the process was paused, for the paused-worker
// scenario: pauseholder's counterpart for task leases.
//
// For each of -backends (and, with -skew, once more through a client that is told every
// expires_at moved by the skew, as a worker whose wall clock is that far behind the service's
// would read it) it runs Work on the pool -prefix:backend:skewed with room for -n handlers.
// Each handler reports its task and blocks. Once -n handlers of every pool hold a task, it
// prints one JSON line {"held": ...} with each lease's token, narrows itself to one P and
// spins, reading the clock, until the clock jumps by more than -gap (the test stopped it with
// SIGSTOP, a rival picked the tasks, and it was continued): the spinning goroutine is the
// first to run after SIGCONT and holds the only P, so no timer can notice an overdue lease
// before it has checked every lease once. Each lease's first check is one of the handler
// context's Err, a non-blocking receive on its Done, and Task.Err, in turn; a second pass
// reads all of them. It prints one JSON line {"checks": ...}, lets the handlers return and
// exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/coordkit/coordkit/e2e/testdata/pausing"
	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// lease is one held task and what its checks said.
type lease struct {
	Backend string `json:"backend"`
	Pool    string `json:"pool"`
	ID      string `json:"id"`
	Token   uint64 `json:"token"`
	Skewed  bool   `json:"skewed"`
	// First is which check came first (ctx, done, task) and FirstLost what it said.
	First     string `json:"first,omitempty"`
	FirstLost bool   `json:"firstLost"`
	// What the second pass read.
	CtxErr     string `json:"ctxErr,omitempty"`
	DoneClosed bool   `json:"doneClosed"`
	Err        string `json:"err,omitempty"`
	LeaseLost  bool   `json:"leaseLost"` // the context's cause and Task.Err are ErrLeaseLost

	ctx context.Context
	t   *client.Task
}

func main() {
	server := flag.String("server", "", "coord base URL")
	backends := flag.String("backends", "", "comma-separated task backends")
	prefix := flag.String("prefix", "", "pool prefix")
	n := flag.Int("n", 10, "leases per pool")
	ttl := flag.Duration("ttl", time.Second, "lease ttl")
	gap := flag.Duration("gap", 500*time.Millisecond, "a clock jump longer than this is the pause")
	skew := flag.Duration("skew", 0, "also work -n tasks per backend through a client told every expires_at moved by this")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("pauseworker: ")

	clients := map[bool]*client.Client{false: client.New(*server)}
	if *skew != 0 {
		clients[true] = client.New(*server, client.WithConnectOptions(connect.WithInterceptors(skewed(*skew))))
	}
	pools := len(strings.Split(*backends, ",")) * len(clients)
	var (
		mu      sync.Mutex
		leases  []*lease
		all     = make(chan struct{})
		release = make(chan struct{})
		stats   = map[string]*client.WorkStats{}
	)
	ctx, stop := context.WithCancel(context.Background())
	var work sync.WaitGroup
	for _, b := range strings.Split(*backends, ",") {
		for skewed, c := range clients {
			pool := fmt.Sprintf("%s:%s:%v", *prefix, b, skewed)
			st := new(client.WorkStats)
			stats[pool] = st
			handler := func(hctx context.Context, t *client.Task) error {
				mu.Lock()
				leases = append(leases, &lease{Backend: b, Pool: pool, ID: t.ID, Token: t.LeaseToken, Skewed: skewed, ctx: hctx, t: t})
				if len(leases) == pools**n {
					close(all)
				}
				mu.Unlock()
				<-release
				return hctx.Err()
			}
			work.Go(func() {
				err := c.Work(ctx, pool, handler, client.WithTaskBackend(b), client.WithConcurrency(*n),
					client.WithLeaseTTL(*ttl), client.WithPollWait(time.Second), client.WithWorkStats(st))
				if err != nil {
					log.Fatalf("work %s: %v", pool, err)
				}
			})
		}
	}
	select {
	case <-all:
	case <-time.After(time.Minute):
		log.Fatal("the handlers did not get every task within a minute")
	}
	mu.Lock() // no handler starts any more: every slot is full
	for _, ls := range leases {
		if err := ls.t.Err(); err != nil {
			log.Fatalf("%s %s lost before the pause: %v", ls.Pool, ls.ID, err)
		}
	}
	// The plain leases are checked first: the sooner a check comes after the resume, the
	// likelier it is that no timer ran before it.
	slices.SortStableFunc(leases, func(a, b *lease) int {
		switch {
		case a.Skewed == b.Skewed:
			return 0
		case b.Skewed:
			return -1
		}
		return 1
	})
	last := pausing.AwaitPause(map[string]any{"held": leases}, *gap)
	// The first checks, before anything else runs.
	for i, ls := range leases {
		switch i % 3 {
		case 0:
			ls.First = "ctx"
			ls.FirstLost = ls.ctx.Err() != nil
		case 1:
			ls.First = "done"
			select {
			case <-ls.ctx.Done():
				ls.FirstLost = true
			default:
			}
		case 2:
			ls.First = "task"
			ls.FirstLost = ls.t.Err() != nil
		}
	}
	resumed := pausing.Resumed(last)
	for _, ls := range leases {
		if err := ls.ctx.Err(); err != nil {
			ls.CtxErr = err.Error()
		}
		select {
		case <-ls.ctx.Done():
			ls.DoneClosed = true
		default:
		}
		if err := ls.t.Err(); err != nil {
			ls.Err = err.Error()
			ls.LeaseLost = errors.Is(err, client.ErrLeaseLost) && errors.Is(context.Cause(ls.ctx), client.ErrLeaseLost)
		}
	}
	pausing.Emit(map[string]any{"checks": leases, "pause": resumed.String()})
	close(release)
	stop()
	mu.Unlock()
	work.Wait()
	for pool, st := range stats {
		if acked := st.Acked.Load(); acked != 0 {
			log.Fatalf("%s: %d lost tasks acked", pool, acked)
		}
	}
}

// skewed is a client interceptor that moves every expires_at the worker is told by skew.
func skewed(skew time.Duration) connect.UnaryInterceptorFunc {
	shift := func(ts *timestamppb.Timestamp) *timestamppb.Timestamp {
		if ts == nil {
			return nil
		}
		return timestamppb.New(ts.AsTime().Add(skew))
	}
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			if err != nil {
				return res, err
			}
			switch m := res.Any().(type) {
			case *taskpickv1.PickResponse:
				for _, lt := range m.GetTasks() {
					lt.ExpiresAt = shift(lt.GetExpiresAt())
				}
			case *taskpickv1.ExtendResponse:
				m.ExpiresAt = shift(m.GetExpiresAt())
			case *taskpickv1.BatchResponse:
				for _, r := range m.GetResults() {
					if e := r.GetExtend(); e != nil {
						e.ExpiresAt = shift(e.GetExpiresAt())
					}
				}
			}
			return res, nil
		}
	}
}
