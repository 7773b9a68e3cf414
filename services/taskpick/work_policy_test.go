package taskpick_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// TestWorkFollowsThePoolPolicy: Work without WithBackoff nacks a failed task without
// retry_after, so the pool's retry policy delays it (an hour here); with WithBackoff the
// worker's own delay (0) wins over the policy.
func TestWorkFollowsThePoolPolicy(t *testing.T) {
	t.Parallel()
	url := workServer(t)
	for _, backend := range workBackends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			c := client.New(url)
			pool := testenv.Prefix(t)
			settings, err := c.Pool(backend, pool).SetSettings(context.Background(), client.PoolSettings{
				Retry: &client.RetryPolicy{Initial: time.Hour, Max: 2 * time.Hour}})
			if err != nil || settings.Retry == nil || settings.Retry.Initial != time.Hour || settings.Retry.Multiplier != 2 {
				t.Fatalf("SetSettings: %+v %v", settings, err)
			}
			workPut(t, c, backend, pool, []string{"policy"})
			get := func() *taskpickv1.Task {
				r, err := c.Tasks().Get(context.Background(), &taskpickv1.GetRequest{Backend: backend, Pool: pool, Id: "policy"})
				if err != nil {
					t.Fatalf("Get: %v", err)
				}
				return r.GetTask()
			}

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			failed := time.Now()
			handler := func(context.Context, *client.Task) error { return errors.New("boom") }
			var stats client.WorkStats
			go func() { // stop once the Nack is answered: a stopping Work nacks with no delay
				for stats.Nacked.Load() == 0 && ctx.Err() == nil {
					time.Sleep(5 * time.Millisecond)
				}
				cancel()
			}()
			runWork(t, ctx, time.Minute, c, pool, handler, client.WithTaskBackend(backend), client.WithWorkStats(&stats))
			task := get()
			due := task.GetRunAt().AsTime().Sub(failed)
			if stats.Nacked.Load() != 1 || task.GetState() != taskpickv1.State_STATE_DELAYED || due < 50*time.Minute || due > 61*time.Minute {
				t.Fatalf("after a failure under a 1h policy: nacked %d, task %v due in %v; want delayed about 1h",
					stats.Nacked.Load(), task.GetState(), due)
			}

			// WithBackoff's delay wins: a task failing once is back at once, and acked.
			workPut(t, c, backend, pool, []string{"own"})
			if err := c.Pool(backend, pool).Cancel(context.Background(), "policy"); err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			ctx, cancel = context.WithCancel(context.Background())
			defer cancel()
			handler = func(_ context.Context, task *client.Task) error {
				if task.Attempt == 1 {
					return errors.New("boom")
				}
				cancel()
				return nil
			}
			runWork(t, ctx, time.Minute, c, pool, handler, client.WithTaskBackend(backend),
				client.WithBackoff(func(uint32) time.Duration { return 0 }))

			// A pool without a policy still backs off: DefaultBackoff's 1s after attempt 1.
			bare := pool + "-bare"
			workPut(t, c, backend, bare, []string{"bare"})
			ctx, cancel = context.WithCancel(context.Background())
			defer cancel()
			var bareStats client.WorkStats
			go func() {
				for bareStats.Nacked.Load() == 0 && ctx.Err() == nil {
					time.Sleep(5 * time.Millisecond)
				}
				cancel()
			}()
			failed = time.Now()
			runWork(t, ctx, time.Minute, c, bare, func(context.Context, *client.Task) error { return errors.New("boom") },
				client.WithTaskBackend(backend), client.WithWorkStats(&bareStats))
			r, err := c.Tasks().Get(context.Background(), &taskpickv1.GetRequest{Backend: backend, Pool: bare, Id: "bare"})
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if due := r.GetTask().GetRunAt().AsTime().Sub(failed); bareStats.Nacked.Load() != 1 || r.GetTask().GetAttempt() != 1 || due < 900*time.Millisecond || due > time.Minute {
				t.Fatalf("after a failure in a pool without a policy: nacked %d, task %v due in %v; want DefaultBackoff's 1s",
					bareStats.Nacked.Load(), r.GetTask(), due)
			}
		})
	}
}
