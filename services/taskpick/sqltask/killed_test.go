package sqltask_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// TestPostgresConnectionsKilledMidWork terminates the backend's server connections
// (pg_terminate_backend) again and again while workers pick, ack and sweep: a call cut off
// answers unavailable, or runs again on a fresh connection, and nothing else. No task is
// leased twice at once (a pick of a task before the previous lease of it could have ended
// is a double grab; tokens never repeat), and none is lost: every task is acked in the end,
// those whose pick answer was cut off after the pick committed once their lease ends.
func TestPostgresConnectionsKilledMidWork(t *testing.T) {
	ctx := context.Background()
	app := fmt.Sprintf("coordkit-killed-%d", time.Now().UnixNano())
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	schema := testenv.PostgresSchema(t)
	db, err := sqldb.OpenPostgres(ctx, u.String(), sqldb.PostgresConfig{Schema: schema, MaxConns: 12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	killer, err := sqldb.OpenPostgres(ctx, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killer.Close() })
	b, err := sqltask.New(ctx, db, sqltask.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	const tasks, ttl = 400, 1500 * time.Millisecond
	const pool = "killed"
	for start := 0; start < tasks; start += 100 {
		batch := make([]taskpick.NewTask, 100)
		for i := range batch {
			batch[i] = taskpick.NewTask{ID: fmt.Sprint("t", start+i), MaxAttempts: 1000}
		}
		if _, err := b.Put(ctx, pool, batch); err != nil {
			t.Fatal(err)
		}
	}

	type leaseSeen struct {
		token uint64
		start time.Time
	}
	var mu sync.Mutex
	seen := map[string]leaseSeen{}
	acked := map[string]bool{}
	var failures []string
	fail := func(f string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(f, args...))
	}
	var cut atomic.Int64
	unavailable := func(op string, err error) bool {
		if errors.Is(err, taskpick.ErrUnavailable) {
			cut.Add(1)
			return true
		}
		if err != nil {
			fail("%s: %v, want nil or unavailable", op, err)
		}
		return false
	}

	stop := make(chan struct{})
	var bg sync.WaitGroup
	var kills atomic.Int64
	bg.Go(func() {
		for round := 0; ; round++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(20+rand.N(60)) * time.Millisecond):
			}
			// Mostly connections in the middle of a call, so some call is cut off however fast
			// the server answers; every third round the idle ones too, found by their next call.
			var n int64
			if err := killer.QueryRowContext(ctx, "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = ? AND (state <> 'idle' OR ?)",
				app, round%3 == 0).Scan(&n); err != nil {
				fail("kill: %v", err)
				return
			}
			kills.Add(n)
		}
	})
	bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			_, err := b.Sweep(ctx, 1000)
			unavailable("sweep", err)
		}
	})

	deadline := time.Now().Add(60 * time.Second)
	done := func() bool { // every task acked, and some call cut off (the workers pick on until one is)
		mu.Lock()
		defer mu.Unlock()
		return len(acked) == tasks && cut.Load() > 0
	}
	var workers sync.WaitGroup
	for w := range 8 {
		workers.Go(func() {
			digests := []string{fmt.Sprint("d", w, "a"), fmt.Sprint("d", w, "b"), fmt.Sprint("d", w, "c")}
			for !done() && time.Now().Before(deadline) {
				start := time.Now()
				p, err := b.Pick(ctx, pool, taskpick.PickSpec{N: 3, TTL: ttl, Order: taskpick.Order(w % 3), Digests: digests, MaxBytes: taskpick.DefaultMaxAnswerBytes})
				if unavailable("pick", err) || err != nil {
					continue
				}
				if len(p.Tasks) == 0 {
					time.Sleep(20 * time.Millisecond) // the rest are leased by cut-off picks
					continue
				}
				for i, lt := range p.Tasks {
					mu.Lock()
					prev, ok := seen[lt.ID]
					if ok && (lt.Token <= prev.token || start.Before(prev.start.Add(ttl))) {
						failures = append(failures, fmt.Sprintf("%s picked with token %d %v after a pick with token %d: a double grab",
							lt.ID, lt.Token, start.Sub(prev.start), prev.token))
					}
					seen[lt.ID] = leaseSeen{lt.Token, start}
					mu.Unlock()
					lease := taskpick.Lease{Token: lt.Token, Digest: digests[i]}
					for cutOff := false; ; cutOff = true {
						err := b.Ack(ctx, pool, lt.ID, lease)
						if errors.Is(err, taskpick.ErrUnavailable) {
							cut.Add(1)
							continue
						}
						if errors.Is(err, taskpick.ErrNotFound) && cutOff {
							err = nil // the cut-off Ack had deleted it
						}
						if errors.Is(err, taskpick.ErrStaleLease) {
							break // the lease ran out while Acks were cut off: the task comes back
						}
						if err != nil {
							fail("ack: %v", err)
						} else {
							mu.Lock()
							if acked[lt.ID] {
								failures = append(failures, lt.ID+" acked twice")
							}
							acked[lt.ID] = true
							mu.Unlock()
						}
						break
					}
				}
			}
		})
	}
	workers.Wait()
	close(stop)
	bg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("%d connections killed, %d calls answered unavailable", kills.Load(), cut.Load())
	if len(acked) != tasks {
		t.Fatalf("%d of %d tasks acked within 60s: the rest were lost", len(acked), tasks)
	}
	st, err := b.Stats(ctx, pool)
	for try := 0; errors.Is(err, taskpick.ErrUnavailable) && try < 10; try++ {
		st, err = b.Stats(ctx, pool) // a connection the last kill ended, found by this call
	}
	if err != nil || st.Available+st.Delayed+st.Leased+st.Dead != 0 {
		t.Fatalf("after every ack: %+v, %v; want an empty pool", st, err)
	}
	if kills.Load() == 0 || cut.Load() == 0 {
		t.Fatalf("%d connections killed, %d calls cut off: the test attacked nothing", kills.Load(), cut.Load())
	}
}
