package taskpick_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// Work frees a handler's slot when the handler returns and acks or nacks the task after it,
// at most concurrency finishes at once: these tests attack that bound and what Work keeps
// promising with it, against the real service.

// finishWatch sees every Ack and Nack the client sends (one per operation of a Batch too),
// and holds each request until hold lets each of its finishes through, by task id: before the
// request goes out when before is set (a paused backend), else after the service answered it
// (a slow network: the finish is done, its answer late). It also counts the handlers running, so
// that a test sees how many handlers and finishes overlap.
type finishWatch struct {
	hold   func(id string) <-chan struct{}
	before bool

	finishes, handlers, busy   atomic.Int32
	peakFinishes, peakHandlers atomic.Int32
	peakBusy                   atomic.Int32
	mu                         sync.Mutex
	acked                      map[string][]uint64 // lease tokens of the Acks sent, by task
}

func raise(peak *atomic.Int32, now int32) {
	for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
	}
}

// interceptor is the client side of the watch.
func (f *finishWatch) interceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			acks, ids := finishOps(req.Any())
			n := int32(len(ids))
			if n == 0 {
				return next(ctx, req)
			}
			raise(&f.peakFinishes, f.finishes.Add(n))
			raise(&f.peakBusy, f.busy.Add(n))
			defer func() { f.finishes.Add(-n); f.busy.Add(-n) }()
			f.mu.Lock()
			for _, a := range acks {
				f.acked[a.GetId()] = append(f.acked[a.GetId()], a.GetLeaseToken())
			}
			f.mu.Unlock()
			var holds []<-chan struct{}
			if f.hold != nil {
				for _, id := range ids {
					if c := f.hold(id); c != nil {
						holds = append(holds, c)
					}
				}
			}
			wait := func() {
				for _, c := range holds {
					<-c // held whatever the caller's context says
				}
			}
			if f.before {
				wait()
			}
			res, err := next(ctx, req)
			if !f.before {
				wait()
			}
			return res, err
		}
	}
}

// finishOps returns the Acks of a request and the task ids of its Acks and Nacks.
func finishOps(msg any) ([]*taskpickv1.AckRequest, []string) {
	switch m := msg.(type) {
	case *taskpickv1.AckRequest:
		return []*taskpickv1.AckRequest{m}, []string{m.GetId()}
	case *taskpickv1.NackRequest:
		return nil, []string{m.GetId()}
	case *taskpickv1.BatchRequest:
		var acks []*taskpickv1.AckRequest
		var ids []string
		for _, op := range m.GetOperations() {
			switch {
			case op.GetAck() != nil:
				acks = append(acks, op.GetAck())
				ids = append(ids, op.GetAck().GetId())
			case op.GetNack() != nil:
				ids = append(ids, op.GetNack().GetId())
			}
		}
		return acks, ids
	}
	return nil, nil
}

// handler wraps h to count it among the handlers running.
func (f *finishWatch) handler(h func(context.Context, *client.Task) error) func(context.Context, *client.Task) error {
	return func(ctx context.Context, t *client.Task) error {
		raise(&f.peakHandlers, f.handlers.Add(1))
		raise(&f.peakBusy, f.busy.Add(1))
		defer func() { f.handlers.Add(-1); f.busy.Add(-1) }()
		return h(ctx, t)
	}
}

// watchedClient is a client of url whose finishes f watches; batching as the client's
// WithBatching.
func watchedClient(url string, f *finishWatch, batching int) *client.Client {
	f.acked = map[string][]uint64{}
	return client.New(url, client.WithBatching(batching), client.WithConnectOptions(connect.WithInterceptors(f.interceptor())))
}

// sampleLeased reads the pool's leased count every few milliseconds until ctx ends, and
// returns the largest seen.
func sampleLeased(ctx context.Context, c *client.Client, backend, pool string) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var peak uint64
		for ctx.Err() == nil {
			res, err := c.Tasks().Stats(context.Background(), &taskpickv1.StatsRequest{Backend: backend, Pool: pool})
			if err == nil {
				peak = max(peak, res.GetLeased())
			}
			time.Sleep(2 * time.Millisecond)
		}
		out <- peak
	}()
	return out
}

// TestWorkFinishesAfterTheSlot: with every Ack's answer 200ms late, handlers keep running
// while Acks are in flight (more handlers and finishes at once than the concurrency, which
// holding the slot until the Ack would never allow), yet never more than concurrency
// handlers, never more than concurrency finishes, never more than twice the concurrency in
// leases; every task is handled and acked once.
func TestWorkFinishesAfterTheSlot(t *testing.T) {
	t.Parallel()
	url := workServer(t)
	for _, backend := range workBackends {
		for _, batching := range []int{0, client.DefaultBatching} {
			for _, batch := range []int{1, 4} {
				t.Run(fmt.Sprintf("%s/batching%d/batch%d", backend, batching, batch), func(t *testing.T) {
					t.Parallel()
					const n, concurrency = 60, 4
					w := &finishWatch{hold: func(string) <-chan struct{} {
						c := make(chan struct{})
						time.AfterFunc(200*time.Millisecond, func() { close(c) })
						return c
					}}
					c := watchedClient(url, w, batching)
					pool := testenv.Prefix(t)
					workPut(t, c, backend, pool, workIDs(n))

					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					sampling, stopSampling := context.WithCancel(context.Background())
					leased := sampleLeased(sampling, c, backend, pool)
					var mu sync.Mutex
					seen := map[string]int{}
					handler := w.handler(func(context.Context, *client.Task) error {
						time.Sleep(2 * time.Millisecond)
						return nil
					})
					counted := func(ctx context.Context, task *client.Task) error {
						err := handler(ctx, task)
						mu.Lock()
						defer mu.Unlock()
						if seen[task.ID]++; len(seen) == n {
							cancel()
						}
						return err
					}
					var stats client.WorkStats
					runWork(t, ctx, time.Minute, c, pool, counted, client.WithTaskBackend(backend),
						client.WithConcurrency(concurrency), client.WithBatch(batch), client.WithWorkStats(&stats))
					stopSampling()
					peakLeased := <-leased

					for _, id := range workIDs(n) {
						if seen[id] != 1 || len(w.acked[id]) != 1 {
							t.Errorf("%s handled %d times, acked %d times; want once each", id, seen[id], len(w.acked[id]))
						}
					}
					if p := w.peakHandlers.Load(); p > concurrency {
						t.Errorf("%d handlers ran at once, want at most %d", p, concurrency)
					}
					if p := w.peakFinishes.Load(); p > concurrency {
						t.Errorf("%d finishes were in flight at once, want at most %d", p, concurrency)
					}
					// That handlers run beside finishes at all is proven by
					// TestWorkSlowAcksBoundHandlers, whose Acks never answer: here only the bound,
					// since how much they overlap depends on the machine's load.
					if p := w.peakBusy.Load(); p > 2*concurrency {
						t.Errorf("%d handlers and finishes at once, want at most %d", p, 2*concurrency)
					}
					if peakLeased > 2*concurrency {
						t.Errorf("%d tasks leased at once, want at most %d", peakLeased, 2*concurrency)
					}
					if stats.Picked.Load() != n || stats.Acked.Load() != n || stats.Nacked.Load() != 0 || stats.LeasesLost.Load() != 0 || stats.FinishErrors.Load() != 0 {
						t.Errorf("stats: picked %d, acked %d, nacked %d, lost %d, finish errors %d; want %d, %d, 0, 0, 0",
							stats.Picked.Load(), stats.Acked.Load(), stats.Nacked.Load(), stats.LeasesLost.Load(), stats.FinishErrors.Load(), n, n)
					}
					if st := workStats(t, c, backend, pool); st.GetAvailable()+st.GetLeased()+st.GetDelayed()+st.GetDead() != 0 {
						t.Errorf("pool after Work: %v, want empty", st)
					}
				})
			}
		}
	}
}

// TestWorkSlowAcksBoundHandlers: while no Ack is answered (a paused backend, a stalled
// network), Work runs handlers for its free slots until concurrency finishes are in flight
// and concurrency more handlers have returned waiting for their turn, and no further: twice
// the concurrency handled, as many leased. When the answers come, the rest follow.
func TestWorkSlowAcksBoundHandlers(t *testing.T) {
	t.Parallel()
	url := workServer(t)
	for _, backend := range workBackends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			const n, concurrency = 40, 4
			paused := make(chan struct{})
			w := &finishWatch{hold: func(string) <-chan struct{} { return paused }, before: true}
			c := watchedClient(url, w, 0)
			pool := testenv.Prefix(t)
			workPut(t, c, backend, pool, workIDs(n))

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var handled atomic.Int32
			handler := w.handler(func(context.Context, *client.Task) error {
				if handled.Add(1) == n {
					cancel()
				}
				return nil
			})
			var stats client.WorkStats
			done := make(chan struct{})
			go func() {
				defer close(done)
				runWork(t, ctx, time.Minute, c, pool, handler, client.WithTaskBackend(backend),
					client.WithConcurrency(concurrency), client.WithBatch(concurrency), client.WithWorkStats(&stats))
			}()

			waitFor(t, 20*time.Second, "the handlers of twice the concurrency", func() bool { return handled.Load() == 2*concurrency })
			waitFor(t, 20*time.Second, "concurrency Acks in flight", func() bool { return w.finishes.Load() == concurrency })
			// Work has every slot taken by a task waiting for its finish: give it time to
			// overstep, should it.
			time.Sleep(200 * time.Millisecond)
			if h := handled.Load(); h != 2*concurrency {
				t.Errorf("%d handled while no Ack was answered, want %d (concurrency in flight, concurrency waiting)", h, 2*concurrency)
			}
			if st := workStats(t, c, backend, pool); st.GetLeased() != 2*concurrency {
				t.Errorf("%d leased while no Ack was answered, want %d", st.GetLeased(), 2*concurrency)
			}
			close(paused)
			<-done
			if handled.Load() != n || stats.Acked.Load() != n || stats.FinishErrors.Load() != 0 || stats.LeasesLost.Load() != 0 {
				t.Errorf("handled %d, acked %d, finish errors %d, lost %d; want %d, %d, 0, 0",
					handled.Load(), stats.Acked.Load(), stats.FinishErrors.Load(), stats.LeasesLost.Load(), n, n)
			}
			if p := w.peakFinishes.Load(); p > concurrency {
				t.Errorf("%d finishes were in flight at once, want at most %d", p, concurrency)
			}
		})
	}
}

// TestWorkStopWaitsForFinishes: Work stopped while every finish it made is unanswered (held
// until 100ms after the stop: concurrency of them in flight, concurrency more handlers
// returned and waiting for their turn) returns only after every one was answered: none in
// flight when it returns, every success acked and counted, every failure nacked and counted,
// nothing left leased.
func TestWorkStopWaitsForFinishes(t *testing.T) {
	t.Parallel()
	url := workServer(t)
	for _, backend := range workBackends {
		for _, batching := range []int{0, client.DefaultBatching} {
			t.Run(fmt.Sprintf("%s/batching%d", backend, batching), func(t *testing.T) {
				t.Parallel()
				const concurrency = 8
				const n = 2 * concurrency // as many as Work handles while no finish is answered
				released := make(chan struct{})
				w := &finishWatch{hold: func(string) <-chan struct{} { return released }}
				c := watchedClient(url, w, batching)
				pool := testenv.Prefix(t)
				workPut(t, c, backend, pool, workIDs(n))

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var stats client.WorkStats
				var handled, successes, failures atomic.Int32
				var answeredAtStop atomic.Uint64
				handler := w.handler(func(_ context.Context, task *client.Task) error {
					var err error
					if id, _ := strconv.Atoi(strings.TrimPrefix(task.ID, "task-")); id%4 == 0 {
						failures.Add(1)
						err = fmt.Errorf("task %s fails", task.ID)
					} else {
						successes.Add(1)
					}
					if handled.Add(1) == n {
						answeredAtStop.Store(stats.Acked.Load() + stats.Nacked.Load())
						cancel()
						time.AfterFunc(100*time.Millisecond, func() { close(released) })
					}
					return err
				})
				runWork(t, ctx, time.Minute, c, pool, handler, client.WithTaskBackend(backend),
					client.WithConcurrency(concurrency), client.WithBatch(concurrency),
					client.WithBackoff(func(uint32) time.Duration { return time.Hour }), client.WithWorkStats(&stats))

				if f := w.finishes.Load(); f != 0 {
					t.Errorf("Work returned with %d finishes in flight", f)
				}
				if a := answeredAtStop.Load(); a != 0 {
					t.Errorf("%d finishes answered before the stop, want none (all held)", a)
				}
				if stats.Acked.Load() != uint64(successes.Load()) || stats.Nacked.Load() != uint64(failures.Load()) || stats.Picked.Load() != n {
					t.Errorf("acked %d, nacked %d, picked %d; handler successes %d, failures %d, want the same and %d picked",
						stats.Acked.Load(), stats.Nacked.Load(), stats.Picked.Load(), successes.Load(), failures.Load(), n)
				}
				if stats.LeasesLost.Load() != 0 || stats.FinishErrors.Load() != 0 {
					t.Errorf("lost %d, finish errors %d; want 0, 0", stats.LeasesLost.Load(), stats.FinishErrors.Load())
				}
				// The failures before the stop wait out their backoff; one whose Nack was
				// decided after it is available at once.
				st := workStats(t, c, backend, pool)
				if st.GetLeased() != 0 || st.GetDead() != 0 || st.GetAvailable()+st.GetDelayed() != uint64(failures.Load()) {
					t.Errorf("pool after Work: %v, want only the %d failures, none leased", st, failures.Load())
				}
			})
		}
	}
}

// TestWorkLeaseLapsesWaitingToFinish: a task whose handler returned while the finishes are
// at their bound keeps no extension going; when its deadline passes before its turn, it is a
// lost lease: no Ack goes out with that lease, and the task comes back and is acked on its
// next pick.
func TestWorkLeaseLapsesWaitingToFinish(t *testing.T) {
	t.Parallel()
	url := workServer(t)
	for _, backend := range workBackends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			first := make(chan struct{})
			var once sync.Once
			var holding atomic.Bool
			w := &finishWatch{hold: func(id string) <-chan struct{} {
				if id != "a" {
					return nil
				}
				var c chan struct{}
				once.Do(func() { c = first; holding.Store(true) })
				if c == nil {
					return nil
				}
				return c
			}}
			c := watchedClient(url, w, 0)
			pool := testenv.Prefix(t)
			workPut(t, c, backend, pool, []string{"a"})

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var mu sync.Mutex
			var tokens []uint64
			var deadline time.Time
			handler := func(_ context.Context, task *client.Task) error {
				mu.Lock()
				defer mu.Unlock()
				if task.ID == "a" {
					return nil
				}
				tokens = append(tokens, task.LeaseToken)
				if len(tokens) == 1 {
					deadline = task.Deadline()
				} else {
					cancel()
				}
				return nil
			}
			var stats client.WorkStats
			done := make(chan struct{})
			go func() {
				defer close(done)
				runWork(t, ctx, time.Minute, c, pool, handler, client.WithTaskBackend(backend),
					client.WithConcurrency(1), client.WithLeaseTTL(time.Second), client.WithWorkStats(&stats))
			}()
			// a's Ack is in flight, unanswered: b is picked, handled, and waits for its turn.
			waitFor(t, 20*time.Second, "a's Ack in flight", holding.Load)
			workPut(t, c, backend, pool, []string{"b"})
			waitFor(t, 20*time.Second, "b handled, and its deadline passed", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(tokens) == 1 && time.Now().After(deadline)
			})
			close(first)
			<-done

			if len(tokens) != 2 || tokens[1] <= tokens[0] {
				t.Fatalf("b's lease tokens %v, want two picks with increasing tokens", tokens)
			}
			if got := fmt.Sprint(w.acked["b"]); got != fmt.Sprint(tokens[1:]) {
				t.Errorf("b acked with leases %s, want only its second %d", got, tokens[1])
			}
			if stats.LeasesLost.Load() != 1 || stats.Acked.Load() != 2 || stats.Nacked.Load() != 0 {
				t.Errorf("stats: lost %d, acked %d, nacked %d; want 1, 2, 0", stats.LeasesLost.Load(), stats.Acked.Load(), stats.Nacked.Load())
			}
		})
	}
}
