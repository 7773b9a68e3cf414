package sqltask_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// TestRacingWritersOnMySQL races every kind of write on one pool of MySQL tasks with short
// leases: pickers that ack, nack and extend what they picked, a sweeper, and a worker that
// requeues and puts. InnoDB picks deadlock victims among them all the time (a pick locks
// index entries in the opposite order of an ack), and each victim must run again: no call may
// fail with anything but the answers its race allows (stale lease, not found).
func TestRacingWritersOnMySQL(t *testing.T) { racingWriters(t, openEngine(t, "mysql", 16)) }

// TestRacingWritersOnPostgres is the same race on PostgreSQL, where requeues and finishes of
// one task also wait on each other's row locks.
func TestRacingWritersOnPostgres(t *testing.T) { racingWriters(t, openEngine(t, "postgres", 16)) }

func racingWriters(t *testing.T, db *sqldb.DB) {
	ctx := context.Background()
	pool := fmt.Sprintf("deadlocks-%d", time.Now().UnixNano())
	t.Cleanup(func() { db.Exec("DELETE FROM coordkit_tasks WHERE pool = ?", pool) })
	b, err := sqltask.New(ctx, db, sqltask.Config{Retention: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	tasks := make([]taskpick.NewTask, 200)
	for i := range tasks {
		tasks[i] = taskpick.NewTask{ID: fmt.Sprint("t", i), MaxAttempts: 3}
	}
	if _, err := b.Put(ctx, pool, tasks); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	failures := map[string]int{}
	check := func(op string, err error) {
		if err == nil || errors.Is(err, taskpick.ErrStaleLease) || errors.Is(err, taskpick.ErrNotFound) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		failures[op+": "+err.Error()]++
	}
	end := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	wg.Go(func() {
		for time.Now().Before(end) {
			_, err := b.Sweep(ctx, 100)
			check("sweep", err)
		}
	})
	wg.Go(func() {
		for round := 0; time.Now().Before(end); round++ {
			ids := make([]string, 20)
			for i := range ids {
				ids[i] = fmt.Sprint("t", (i*7+round)%len(tasks))
			}
			_, err := b.Requeue(ctx, pool, ids)
			check("requeue", err)
			_, err = b.Put(ctx, pool, tasks[:50])
			check("put", err)
		}
	})
	for g := range 8 {
		wg.Go(func() {
			for time.Now().Before(end) {
				digests := []string{"d0", "d1", "d2", "d3"}
				p, err := b.Pick(ctx, pool, taskpick.PickSpec{N: 4, TTL: 20 * time.Millisecond, Order: taskpick.Order(g % 3),
					Digests: digests, MaxBytes: taskpick.DefaultMaxAnswerBytes})
				check("pick", err)
				for i, lt := range p.Tasks {
					lease := taskpick.Lease{Token: lt.Token, Digest: digests[i]}
					switch (i + g) % 3 {
					case 0:
						check("ack", b.Ack(ctx, pool, lt.ID, lease))
					case 1:
						_, err := b.Nack(ctx, pool, lt.ID, lease, 0, "racing")
						check("nack", err)
					case 2:
						check("extend", b.Extend(ctx, pool, lt.ID, lease, 10*time.Millisecond))
					}
				}
			}
		})
	}
	wg.Wait()
	for failure, n := range failures {
		t.Errorf("%d× %s", n, failure)
	}
}
