package segment_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/idgen/block"
	"github.com/coordkit/coordkit/services/idgen/segment"
)

// TestKilledReservationIsUnavailable terminates the PostgreSQL backend of a reservation
// while it waits inside its transaction (on the tag's row, which another transaction holds):
// the caller is told unavailable, the killed transaction leaves nothing, and the next
// reservation takes the range the killed one would have.
func TestKilledReservationIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.PostgresSchema(t)
	db := openPostgres(t, schema)
	e := newEngine(t, db, nil)
	_, err := e.CreateTag(ctx, "t", 1, 100, "")
	noErr(t, err)

	blocker, err := openPostgres(t, schema).Conn(ctx)
	noErr(t, err)
	defer blocker.Close()
	var blockerPID int
	noErr(t, blocker.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&blockerPID))
	_, err = blocker.ExecContext(ctx, "BEGIN")
	noErr(t, err)
	_, err = blocker.ExecContext(ctx, "SELECT max_id FROM coordkit_idgen_segments WHERE biz_tag = 't' FOR UPDATE")
	noErr(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := e.Next(ctx, "t", 1) // the first Next reserves while the caller waits
		done <- err
	}()
	victim := waitBlocked(t, db, blockerPID)
	var killed bool
	noErr(t, db.QueryRowContext(ctx, "SELECT pg_terminate_backend(?)", victim).Scan(&killed))
	if !killed {
		t.Fatalf("pg_terminate_backend(%d) = false", victim)
	}
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Next still waiting 10s after its connection was terminated")
	}
	if !errors.Is(err, segment.ErrUnavailable) || !errors.Is(err, server.ErrUnavailable) {
		t.Fatalf("Next whose connection was terminated = %v, want ErrUnavailable", err)
	}
	_, err = blocker.ExecContext(ctx, "ROLLBACK")
	noErr(t, err)

	ids, err := e.Next(ctx, "t", 3)
	noErr(t, err)
	if ids[0] != 1 || ids[2] != 3 {
		t.Fatalf("IDs after the killed reservation = %v, want 1..3: the killed transaction must have changed nothing", ids)
	}
}

// waitBlocked returns the backend that waits on a lock blockerPID holds.
func waitBlocked(t *testing.T, db *sqldb.DB, blockerPID int) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var pid int
		err := db.QueryRowContext(context.Background(),
			"SELECT pid FROM pg_stat_activity WHERE ?::int = ANY(pg_blocking_pids(pid)) LIMIT 1", blockerPID).Scan(&pid)
		if err == nil {
			return pid
		}
		if !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
	}
	t.Fatal("no backend waited on the blocker's row lock within 10s")
	return 0
}

// TestKilledConnectionsNeverRepeatIDs runs three pools with a small step on one PostgreSQL
// schema, as three instances would, while their database connections are terminated at
// random moments: inside reservations, at their commits, while idle. Calls may fail, only as
// unavailable; no ID may come twice.
func TestKilledConnectionsNeverRepeatIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.PostgresSchema(t)
	app := fmt.Sprintf("idgen-kill-%x", rand.Uint64())
	u, err := url.Parse(testenv.PostgresURL())
	noErr(t, err)
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()

	const instances, callers = 3, 3
	pools := make([]*block.Pool, instances)
	for i := range pools {
		db, err := sqldb.OpenPostgres(ctx, u.String(), sqldb.PostgresConfig{Schema: schema, MaxConns: 4})
		noErr(t, err)
		t.Cleanup(func() { db.Close() })
		store, err := segment.NewStore(ctx, db)
		noErr(t, err)
		if i == 0 {
			_, err = store.Create(ctx, "t", 1, 10, "")
			noErr(t, err)
		}
		pools[i] = block.NewPool(block.Config{Reserver: store, Policy: block.Fixed, Logger: slog.New(slog.DiscardHandler), Name: "segment"})
		t.Cleanup(func() { pools[i].Close() })
	}
	admin := openPostgres(t, schema)

	var (
		mu    sync.Mutex
		seen  = map[int64]int{}
		dups  []int64
		calls atomic.Int64
		fails atomic.Int64
		kills int
	)
	runCtx, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	var wg sync.WaitGroup
	for i, p := range pools {
		for range callers {
			wg.Go(func() {
				for runCtx.Err() == nil {
					ids, err := p.Next(ctx, "t", 1+rand.IntN(25))
					calls.Add(1)
					if err != nil {
						if !errors.Is(err, segment.ErrUnavailable) {
							t.Errorf("instance %d: Next = %v, want IDs or ErrUnavailable", i, err)
							return
						}
						fails.Add(1)
						continue
					}
					mu.Lock()
					for _, id := range ids {
						if _, dup := seen[id]; dup {
							dups = append(dups, id)
						}
						seen[id] = i
					}
					mu.Unlock()
				}
			})
		}
	}
	for runCtx.Err() == nil {
		var n int
		err := admin.QueryRowContext(ctx, `SELECT COUNT(pg_terminate_backend(pid)) FROM (
			SELECT pid FROM pg_stat_activity WHERE application_name = ? ORDER BY random() LIMIT 1) victims`, app).Scan(&n)
		noErr(t, err)
		kills += n
		time.Sleep(time.Duration(2+rand.IntN(15)) * time.Millisecond)
	}
	wg.Wait()
	if len(dups) > 0 {
		t.Fatalf("%d IDs issued twice (first %v) among %d", len(dups), dups[:min(len(dups), 5)], len(seen))
	}
	if kills == 0 || len(seen) == 0 {
		t.Fatalf("%d connections terminated, %d IDs issued: the test attacked nothing", kills, len(seen))
	}
	t.Logf("%d calls, %d unavailable, %d IDs unique, %d connections terminated", calls.Load(), fails.Load(), len(seen), kills)
}
