// Command pauseholder holds many leases through the SDK and reports what its very first
// check of each says after the process was paused, for the paused-lease scenario.
//
// It takes -n keys on each of -backends, one at a time at staggered moments over a third of
// the ttl so that their renewal timers run in different phases, and prints one JSON line
// {"held": ...} with each lease's fencing token. Then it narrows itself to one P and spins,
// reading the clock, until it sees the clock jump by more than -gap (the test stopped it with
// SIGSTOP, a rival took the locks, and it was continued): the spinning goroutine is the
// first to run after SIGCONT and holds the only P, so the runtime's timers, which would
// notice an overdue lease on their own, cannot run before it has checked every lease once.
// Each lease's first check is one of a non-blocking receive on Lost(), Context().Err() and
// Err(), in turn; a second pass reads all of them, and whether Context's Err and Done agree.
// It prints one JSON line {"checks": ...} and exits.
//
// With -skew, it takes as many leases again through a client that is told every expires_at
// moved by the skew, as a holder whose wall clock is that far behind the service's (or
// ahead, for a negative skew) would read it.
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
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

// lease is one held lock and what its checks said.
type lease struct {
	Backend string `json:"backend"`
	Key     string `json:"key"`
	Token   uint64 `json:"token"`
	Skewed  bool   `json:"skewed"` // taken through the skewed client
	// First is which check came first (lost, ctx, err) and FirstLost what it said.
	First     string `json:"first,omitempty"`
	FirstLost bool   `json:"firstLost"`
	// What the second pass read.
	LostClosed bool   `json:"lostClosed"`
	CtxErr     string `json:"ctxErr,omitempty"`
	DoneClosed bool   `json:"doneClosed"`
	Err        string `json:"err,omitempty"`
	LeaseLost  bool   `json:"leaseLost"` // Err is ErrLeaseLost

	l *client.Lock
}

func main() {
	server := flag.String("server", "", "coord base URL")
	backends := flag.String("backends", "", "comma-separated lock backends")
	prefix := flag.String("prefix", "", "key prefix")
	n := flag.Int("n", 40, "leases per backend")
	ttl := flag.Duration("ttl", time.Second, "lease ttl")
	gap := flag.Duration("gap", 500*time.Millisecond, "a clock jump longer than this is the pause")
	skew := flag.Duration("skew", 0, "also hold -n leases per backend through a client told every expires_at moved by this")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("pauseholder: ")

	clients := map[bool]*client.Client{false: client.New(*server)}
	if *skew != 0 {
		clients[true] = client.New(*server, client.WithConnectOptions(connect.WithInterceptors(skewed(*skew))))
	}
	var leases []*lease
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for _, b := range strings.Split(*backends, ",") {
		for skewed, c := range clients {
			wg.Go(func() {
				step := *ttl / 3 / time.Duration(*n)
				for i := range *n {
					key := fmt.Sprintf("%s:%s:%v:%d", *prefix, b, skewed, i)
					l, err := lockRetrying(c, key, b, *ttl)
					if err != nil {
						select {
						case errs <- err:
						default:
						}
						return
					}
					mu.Lock()
					leases = append(leases, &lease{Backend: b, Key: key, Token: l.FencingToken(), Skewed: skewed, l: l})
					mu.Unlock()
					time.Sleep(step)
				}
			})
		}
	}
	wg.Wait()
	select {
	case err := <-errs:
		log.Fatal(err)
	default:
	}
	for _, ls := range leases {
		if err := ls.l.Err(); err != nil {
			log.Fatalf("%s lost before the pause: %v", ls.Key, err)
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
			ls.First = "lost"
			select {
			case <-ls.l.Lost():
				ls.FirstLost = true
			default:
			}
		case 1:
			ls.First = "ctx"
			ls.FirstLost = ls.l.Context().Err() != nil
		case 2:
			ls.First = "err"
			ls.FirstLost = ls.l.Err() != nil
		}
	}
	resumed := pausing.Resumed(last)
	for _, ls := range leases {
		select {
		case <-ls.l.Lost():
			ls.LostClosed = true
		default:
		}
		ctx := ls.l.Context()
		if err := ctx.Err(); err != nil {
			ls.CtxErr = err.Error()
		}
		select {
		case <-ctx.Done():
			ls.DoneClosed = true
		default:
		}
		if err := ls.l.Err(); err != nil {
			ls.Err = err.Error()
			ls.LeaseLost = errors.Is(err, client.ErrLeaseLost)
		}
	}
	pausing.Emit(map[string]any{"checks": leases, "pause": resumed.String()})
	for _, ls := range leases {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ls.l.Unlock(ctx) //nolint:errcheck // lost: the release is refused
		cancel()
	}
}

// lockRetrying takes key at once, trying again while the backend is unavailable (a Redlock
// node missing its tenth of the ttl on a loaded host).
func lockRetrying(c *client.Client, key, backend string, ttl time.Duration) (*client.Lock, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l, err := c.TryLock(ctx, key, client.WithLockBackend(backend), client.WithTTL(ttl))
		cancel()
		if err == nil || time.Now().After(deadline) {
			return l, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// skewed is a client interceptor that moves every expires_at the holder is told by skew.
func skewed(skew time.Duration) connect.UnaryInterceptorFunc {
	shift := func(l *lockv1.Lease) {
		if l.GetExpiresAt() != nil {
			l.ExpiresAt = timestamppb.New(l.GetExpiresAt().AsTime().Add(skew))
		}
	}
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			if err != nil {
				return res, err
			}
			switch m := res.Any().(type) {
			case *lockv1.AcquireResponse:
				shift(m.GetLease())
			case *lockv1.RenewResponse:
				shift(m.GetLease())
			case *lockv1.BatchResponse:
				for _, r := range m.GetResults() {
					shift(r.GetAcquire().GetLease())
					shift(r.GetRenew().GetLease())
				}
			}
			return res, nil
		}
	}
}
