package taskpick_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/redistask"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// The SDK's Work (libs/client) against the real service, on the real SQLite, Redis and
// PostgreSQL.

// workBackends are the backends the Work tests run on.
var workBackends = []string{"sqlite", "redis", "postgres"}

// workServer serves one task service with a sqlite (in a temporary directory), a redis
// (under a unique prefix) and a postgres (in a schema of the test's own) backend, sweeping
// every 50ms, and returns its base URL.
func workServer(t *testing.T) string {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	sq, err := sqltask.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "tasks.db"), sqltask.Config{})
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { sq.Close() })
	pg := postgresStore(t)(t)
	rdb := testenv.Redis(t, "")
	prefix := testenv.Prefix(t)
	testenv.CleanRedis(t, rdb, prefix)
	svc, err := taskpick.NewService(taskpick.Config{
		Backends: map[string]taskpick.Backend{
			"sqlite": sq, "postgres": pg,
			"redis": redistask.New(rdb, redistask.Config{Prefix: prefix, Scripts: redisconf.Pipelined(rdb)}),
		},
		Default:       "sqlite",
		SweepInterval: 50 * time.Millisecond,
		Logger:        quiet,
	})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	t.Cleanup(func() { svc.Close() })
	srv := server.New(server.Config{Logger: quiet})
	srv.Handle(taskpickv1connect.NewTaskPickServiceHandler(svc, srv.HandlerOptions()...))
	url, _ := testenv.Serve(t, srv)
	return url
}

// workPut puts tasks ids[i] into pool, in batches.
func workPut(t *testing.T, c *client.Client, backend, pool string, ids []string) {
	t.Helper()
	for len(ids) > 0 {
		n := min(len(ids), taskpick.MaxPutTasks)
		req := &taskpickv1.PutRequest{Backend: backend, Pool: pool}
		for _, id := range ids[:n] {
			req.Tasks = append(req.Tasks, &taskpickv1.NewTask{Id: id, Payload: []byte("payload of " + id)})
		}
		if _, err := c.Tasks().Put(context.Background(), req); err != nil {
			t.Fatalf("put: %v", err)
		}
		ids = ids[n:]
	}
}

// workIDs returns task-0 … task-(n-1).
func workIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("task-%d", i)
	}
	return ids
}

// runWork runs Work until it returns, failing the test when that takes over limit (the ctx
// Work gets is canceled then) or Work returns an error.
func runWork(t *testing.T, ctx context.Context, limit time.Duration, c *client.Client, pool string, h func(context.Context, *client.Task) error, opts ...client.WorkOption) {
	t.Helper()
	ctx, cancel := context.WithTimeoutCause(ctx, limit, errors.New("test: Work ran too long"))
	defer cancel()
	err := c.Work(ctx, pool, h, opts...)
	if context.Cause(ctx) != nil && !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Fatalf("Work still running after %v: %v", limit, context.Cause(ctx))
	}
	if err != nil {
		t.Fatalf("Work = %v", err)
	}
}

// workStats reads a pool's counts.
func workStats(t *testing.T, c *client.Client, backend, pool string) *taskpickv1.StatsResponse {
	t.Helper()
	res, err := c.Tasks().Stats(context.Background(), &taskpickv1.StatsRequest{Backend: backend, Pool: pool})
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return res
}

// TestWorkExactlyOnce: 200 tasks through Work with 8 handlers at once, picking one or a
// batch at a time: each handled exactly once, never more than 8 at once, all acked.
func TestWorkExactlyOnce(t *testing.T) {
	t.Parallel()
	url := workServer(t)
	for _, backend := range workBackends {
		for _, batch := range []int{1, 8} {
			t.Run(fmt.Sprintf("%s/batch%d", backend, batch), func(t *testing.T) {
				t.Parallel()
				const n, concurrency = 200, 8
				c := client.New(url)
				pool := testenv.Prefix(t)
				workPut(t, c, backend, pool, workIDs(n))

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var mu sync.Mutex
				seen := map[string]int{}
				var running, peak atomic.Int32
				handler := func(ctx context.Context, task *client.Task) error {
					now := running.Add(1)
					defer running.Add(-1)
					for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
					}
					if string(task.Payload) != "payload of "+task.ID || task.Attempt != 1 || task.LeaseToken == 0 {
						return fmt.Errorf("task %+v: wrong payload, attempt or token", task)
					}
					time.Sleep(time.Millisecond) // let handlers overlap
					mu.Lock()
					defer mu.Unlock()
					seen[task.ID]++
					if len(seen) == n {
						cancel() // every task done: the acks of the last ones go out while Work stops
					}
					return nil
				}
				var stats client.WorkStats
				runWork(t, ctx, time.Minute, c, pool, handler, client.WithTaskBackend(backend),
					client.WithConcurrency(concurrency), client.WithBatch(batch), client.WithWorkStats(&stats))

				for _, id := range workIDs(n) {
					if seen[id] != 1 {
						t.Errorf("%s handled %d times, want exactly once", id, seen[id])
					}
				}
				if p := peak.Load(); p > concurrency {
					t.Errorf("%d handlers ran at once, want at most %d", p, concurrency)
				}
				if stats.Acked.Load() != n || stats.Nacked.Load() != 0 || stats.LeasesLost.Load() != 0 {
					t.Errorf("stats: acked %d, nacked %d, lost %d; want %d, 0, 0", stats.Acked.Load(), stats.Nacked.Load(), stats.LeasesLost.Load(), n)
				}
				if st := workStats(t, c, backend, pool); st.GetAvailable()+st.GetLeased()+st.GetDelayed()+st.GetDead() != 0 {
					t.Errorf("pool after Work: %v, want empty", st)
				}
			})
		}
	}
}

// TestWorkRetriesFailures: a handler that fails on attempts 1 and 2 has its task nacked
// (with the backoff WithBackoff gives, 0 here) and acked at attempt 3.
func TestWorkRetriesFailures(t *testing.T) {
	t.Parallel()
	url := workServer(t)
	for _, backend := range workBackends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			const n = 5
			c := client.New(url)
			pool := testenv.Prefix(t)
			workPut(t, c, backend, pool, workIDs(n))

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var mu sync.Mutex
			attempts := map[string][]uint32{}
			succeeded := 0
			handler := func(ctx context.Context, task *client.Task) error {
				mu.Lock()
				defer mu.Unlock()
				attempts[task.ID] = append(attempts[task.ID], task.Attempt)
				if task.Attempt < 3 {
					return fmt.Errorf("attempt %d fails", task.Attempt)
				}
				if succeeded++; succeeded == n {
					cancel()
				}
				return nil
			}
			var stats client.WorkStats
			runWork(t, ctx, time.Minute, c, pool, handler, client.WithTaskBackend(backend), client.WithConcurrency(2),
				client.WithBackoff(func(uint32) time.Duration { return 0 }), client.WithWorkStats(&stats))

			for _, id := range workIDs(n) {
				if got := fmt.Sprint(attempts[id]); got != "[1 2 3]" {
					t.Errorf("%s: attempts %s, want [1 2 3]", id, got)
				}
				_, err := c.Tasks().Get(context.Background(), &taskpickv1.GetRequest{Backend: backend, Pool: pool, Id: id})
				if connect.CodeOf(err) != connect.CodeNotFound {
					t.Errorf("%s after its ack: Get = %v, want not_found (acked and deleted)", id, err)
				}
			}
			if stats.Acked.Load() != n || stats.Nacked.Load() != 2*n {
				t.Errorf("stats: acked %d, nacked %d; want %d, %d", stats.Acked.Load(), stats.Nacked.Load(), n, 2*n)
			}
		})
	}
}

// dropExtend fails every Extend call on the way out, as a network that eats them would.
type dropExtend struct{ base http.RoundTripper }

func (d dropExtend) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/Extend") {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, errors.New("test: Extend dropped")
	}
	return d.base.RoundTrip(r)
}

// TestWorkLeaseLost: when the lease is lost while the handler runs, its context is canceled
// with ErrLeaseLost within about the ttl, and Work neither acks nor nacks the task.
func TestWorkLeaseLost(t *testing.T) {
	t.Parallel()
	url := workServer(t)
	for _, backend := range workBackends {
		// No extension gets through: the lease runs out (the watchdog gives up at its end
		// less the margin), the sweeper recovers the task and Work picks it again.
		t.Run(backend+"/extensions dropped", func(t *testing.T) {
			t.Parallel()
			httpc := client.DefaultHTTPClient()
			httpc.Transport = dropExtend{httpc.Transport}
			c := client.New(url, client.WithHTTPClient(httpc))
			pool := testenv.Prefix(t)
			workPut(t, c, backend, pool, []string{"slow"})

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			lost := make(chan error, 1)
			var lostAfter time.Duration
			var mu sync.Mutex
			var tokens []uint64
			handler := func(hctx context.Context, task *client.Task) error {
				mu.Lock()
				tokens = append(tokens, task.LeaseToken)
				mu.Unlock()
				if task.Attempt == 1 {
					start := time.Now()
					<-hctx.Done()
					lostAfter = time.Since(start)
					lost <- context.Cause(hctx)
					return hctx.Err()
				}
				cancel() // the second pick, after the sweeper recovered the task: done
				return nil
			}
			var stats client.WorkStats
			runWork(t, ctx, time.Minute, c, pool, handler, client.WithTaskBackend(backend),
				client.WithLeaseTTL(time.Second), client.WithWorkStats(&stats))

			if cause := <-lost; !errors.Is(cause, client.ErrLeaseLost) {
				t.Fatalf("handler's context ended with %v, want ErrLeaseLost", cause)
			}
			if lostAfter > 5*time.Second {
				t.Errorf("lease loss noticed after %v, want within the 1s ttl (5s allowed)", lostAfter)
			}
			if len(tokens) != 2 || tokens[1] <= tokens[0] {
				t.Errorf("lease tokens %v, want two picks with increasing tokens", tokens)
			}
			if stats.LeasesLost.Load() != 1 || stats.Nacked.Load() != 0 || stats.Acked.Load() != 1 {
				t.Errorf("stats: lost %d, nacked %d, acked %d; want 1, 0, 1 (the second pick)",
					stats.LeasesLost.Load(), stats.Nacked.Load(), stats.Acked.Load())
			}
		})

		// Someone gives the task back with the worker's token and another worker picks it:
		// the next extension is refused and the handler stops at once.
		t.Run(backend+"/taken by another worker", func(t *testing.T) {
			t.Parallel()
			c := client.New(url)
			pool := testenv.Prefix(t)
			workPut(t, c, backend, pool, []string{"stolen"})

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			picked := make(chan *client.Task, 1)
			lost := make(chan error, 1)
			handler := func(hctx context.Context, task *client.Task) error {
				picked <- task
				<-hctx.Done()
				lost <- context.Cause(hctx)
				return hctx.Err()
			}
			var stats client.WorkStats
			done := make(chan struct{})
			go func() {
				defer close(done)
				runWork(t, ctx, time.Minute, c, pool, handler, client.WithTaskBackend(backend),
					client.WithLeaseTTL(3*time.Second), client.WithWorkStats(&stats))
			}()

			held := <-picked
			tasks := c.Tasks()
			if _, err := tasks.Nack(ctx, &taskpickv1.NackRequest{Backend: backend, Pool: pool, Id: "stolen", LeaseToken: held.LeaseToken, LeaseSecret: held.LeaseSecret()}); err != nil {
				t.Fatalf("nack with the worker's lease: %v", err)
			}
			// Work's only slot is busy, so this raw Pick is the one that gets the task.
			res, err := tasks.Pick(ctx, &taskpickv1.PickRequest{Backend: backend, Pool: pool, Ttl: durationpb.New(time.Minute)})
			if err != nil || len(res.GetTasks()) != 1 {
				t.Fatalf("the other worker's pick = %v, %v; want the task", res, err)
			}
			mine := res.GetTasks()[0]
			start := time.Now()
			select {
			case cause := <-lost:
				if !errors.Is(cause, client.ErrLeaseLost) || connect.CodeOf(cause) != connect.CodeFailedPrecondition {
					t.Fatalf("handler's context ended with %v, want ErrLeaseLost wrapping failed_precondition", cause)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("handler still running 5s after its task was taken (the ttl is 3s)")
			}
			t.Logf("lease loss noticed %v after the other pick", time.Since(start).Round(time.Millisecond))
			cancel()
			<-done
			if stats.LeasesLost.Load() != 1 || stats.Nacked.Load() != 0 || stats.Acked.Load() != 0 {
				t.Errorf("stats: lost %d, nacked %d, acked %d; want 1, 0, 0", stats.LeasesLost.Load(), stats.Nacked.Load(), stats.Acked.Load())
			}
			// The task is the other worker's: its lease still finishes it.
			if _, err := tasks.Ack(context.Background(), &taskpickv1.AckRequest{Backend: backend, Pool: pool, Id: "stolen", LeaseToken: mine.GetLeaseToken(), LeaseSecret: mine.GetLeaseSecret()}); err != nil {
				t.Fatalf("the other worker's ack: %v", err)
			}
		})
	}
}
