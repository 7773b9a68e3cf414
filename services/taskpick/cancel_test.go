package taskpick_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/redistask"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// TestCancelledKeptForRetention: with a retention a cancelled task is kept as CANCELLED (Get
// shows it, Stats counts it, a second cancel succeeds, a Put of its id finds it, no Pick
// takes it) until the sweep purges it; then it is not_found. The SQL engines share the code
// that SQLite runs; Redis has its own scripts.
func TestCancelledKeptForRetention(t *testing.T) {
	t.Parallel()
	const keep = 700 * time.Millisecond
	open := map[string]func(t *testing.T) taskpick.Backend{
		"redis": func(t *testing.T) taskpick.Backend {
			prefix := testenv.Prefix(t)
			rdb := testenv.Redis(t, "")
			testenv.CleanRedis(t, rdb, prefix)
			return redistask.New(rdb, redistask.Config{Prefix: prefix, Retention: keep, Scripts: redisconf.Pipelined(rdb)})
		},
		"sqlite": func(t *testing.T) taskpick.Backend {
			b, err := sqltask.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "tasks.db"), sqltask.Config{Retention: keep})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
	}
	for name, open := range open {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in, p := startInstance(t, name, open(t), nil), pool(t, "kept")
			put(t, in, p, task("a"))
			cancelTask(t, in, p, "a")
			cancelTask(t, in, p, "a") // kept as cancelled: again is no error
			if s := get(t, in, p, "a").GetState(); s != taskpickv1.State_STATE_CANCELLED {
				t.Fatalf("Get of a cancelled task: %v, want STATE_CANCELLED", s)
			}
			if s := stats(t, in, p); s.GetCancelled() != 1 || s.GetAvailable() != 0 {
				t.Fatalf("Stats: %v, want 1 cancelled and nothing available", s)
			}
			if created := put(t, in, p, task("a")); created[0] {
				t.Fatal("a Put of a kept cancelled id created it again")
			}
			if got := pick(t, in, &taskpickv1.PickRequest{Pool: p}); len(got) != 0 {
				t.Fatalf("Pick leased a cancelled task: %v", ids(got))
			}
			waitFor(t, 20*time.Second, "the cancelled task purged", func() bool {
				_, err := in.client.Get(ctx, &taskpickv1.GetRequest{Pool: p, Id: "a"})
				return connect.CodeOf(err) == connect.CodeNotFound
			})
			_, err := in.client.CancelTask(ctx, &taskpickv1.CancelTaskRequest{Pool: p, Id: "a"})
			wantCode(t, err, connect.CodeNotFound)
		})
	}
}
