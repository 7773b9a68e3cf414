package sqltask_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// TestPickFindsATaskBesideBusyPools: on InnoDB a pick's locking range read also locks the
// first index entry past its range, which belongs to the next pool in the index: a pick of
// an empty pool holds the neighbouring pool's first task until it commits. A pick of that
// pool, which skips locked rows, must still lease its task: each worker here puts a task to
// a fresh pool and picks it at once, beside pickers of an empty pool that sorts right before
// it, and a sweeper. Before takeSkipped, more than half of these picks came back empty.
func TestPickFindsATaskBesideBusyPools(t *testing.T) {
	for _, engine := range rowLockEngines {
		t.Run(engine, func(t *testing.T) { pickBesideBusyPools(t, openEngine(t, engine, 32)) })
	}
}

func pickBesideBusyPools(t *testing.T, db *sqldb.DB) {
	ctx := context.Background()
	prefix := testenv.Prefix(t)
	t.Cleanup(func() { db.Exec("DELETE FROM coordkit_tasks WHERE pool >= ? AND pool < ?", prefix, prefix+"~") })
	b, err := sqltask.New(ctx, db, sqltask.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	const workers = 6
	spec := func(o taskpick.Order) taskpick.PickSpec {
		return taskpick.PickSpec{N: 1, TTL: time.Minute, Order: o, Digests: []string{"d"}, MaxBytes: taskpick.DefaultMaxAnswerBytes}
	}
	var stop atomic.Bool
	var empty atomic.Int64
	var failures sync.Map
	fail := func(what string, err error) { failures.Store(fmt.Sprint(what, ": ", err), true) }
	var wg sync.WaitGroup
	// Each round of a worker puts to a fresh pool; pickers of a pool that stays empty, and
	// sorts right before it, keep reaching into it.
	var round [workers]atomic.Int64
	name := func(w int, i int64) string { return fmt.Sprintf("%s:%d:%06d", prefix, w, i) }
	for w := range workers {
		for o := range 3 {
			wg.Go(func() {
				for !stop.Load() {
					if _, err := b.Pick(ctx, name(w, round[w].Load()), spec(taskpick.Order(o))); err != nil {
						fail("empty pick", err)
					}
				}
			})
		}
	}
	wg.Go(func() {
		for !stop.Load() {
			if _, err := b.Sweep(ctx, 1000); err != nil {
				fail("sweep", err)
			}
		}
	})
	var rounds atomic.Int64
	var workersDone sync.WaitGroup
	end := time.Now().Add(3 * time.Second)
	for w := range workers {
		workersDone.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				round[w].Store(int64(i))
				pool, id := name(w, int64(i))+":w", fmt.Sprint("x", i)
				if _, err := b.Put(ctx, pool, []taskpick.NewTask{{ID: id, MaxAttempts: 3}}); err != nil {
					fail("put", err)
					return
				}
				p, err := b.Pick(ctx, pool, spec(taskpick.Order(i%3)))
				if err != nil {
					fail("pick", err)
					return
				}
				rounds.Add(1)
				if len(p.Tasks) != 1 {
					empty.Add(1)
					// Take it anyway, so the next round starts from an empty pool.
					for len(p.Tasks) == 0 {
						if p, err = b.Pick(ctx, pool, spec(taskpick.FIFO)); err != nil {
							fail("pick", err)
							return
						}
					}
				}
				if p.Tasks[0].ID != id {
					fail("pick", fmt.Errorf("picked %s, want %s", p.Tasks[0].ID, id))
				}
				if err := b.Ack(ctx, pool, id, taskpick.Lease{Token: p.Tasks[0].Token, Digest: "d"}); err != nil {
					fail("ack", err)
				}
			}
		})
	}
	workersDone.Wait()
	stop.Store(true)
	wg.Wait()
	failures.Range(func(k, _ any) bool { t.Error(k); return true })
	if n := empty.Load(); n > 0 {
		t.Fatalf("%d of %d picks right after a put of the pool's only task came back empty", n, rounds.Load())
	}
	t.Logf("%d put-then-pick rounds", rounds.Load())
}
