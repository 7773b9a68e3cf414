package sqllock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestContendedAttemptLocksNothing holds the write lock a Release or Renew of the holder
// would take (the key's row on MySQL, the database on SQLite) while a rival tries the taken
// lock: the rival's attempt must answer "held" without waiting for that lock. Waiters'
// attempts that queued on the holder's row are what made 1,000 MySQL waiters slow everyone
// else down.
func TestContendedAttemptLocksNothing(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s := e.newStore(t)
		b := s.open(t)
		if att, err := b.TryAcquire(ctx, "hot", "holder", time.Minute); err != nil || !att.Acquired {
			t.Fatalf("acquire: %+v, %v", att, err)
		}
		// A transaction of the test's own, holding what a Release of "hot" would lock.
		tx, err := s.raw.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		var owner string
		if err := tx.QueryRow("SELECT owner FROM "+leasesTable+" WHERE scope = ? AND lock_key = ?"+b.d.ForUpdate, s.scope, "hot").Scan(&owner); err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		att, err := b.TryAcquire(actx, "hot", "rival", time.Minute)
		if err != nil {
			t.Fatalf("rival's attempt while the holder's row was locked: %v (it waited for the row lock)", err)
		}
		if att.Acquired || !att.Holder.Held || att.Holder.FencingToken == 0 {
			t.Fatalf("rival's attempt: %+v, want the holder reported", att)
		}
	})
}

// TestWaitersLeaveConnectionsForRenew fills MySQL with attempts that cannot finish (they
// wait for a row lock the test holds, as attempts behind a slow holder do): a holder's Renew
// and Release of another key must still get a connection and succeed.
func TestWaitersLeaveConnectionsForRenew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mysqlStore(t)
	b := s.open(t)
	if att, err := b.TryAcquire(ctx, "mine", "holder", time.Minute); err != nil || !att.Acquired {
		t.Fatalf("acquire: %+v, %v", att, err)
	}
	// "busy" has a free row; the test's transaction locks it, so every attempt on it gets
	// past the plain read and then waits inside its transaction, holding a connection.
	if att, err := b.TryAcquire(ctx, "busy", "x", time.Minute); err != nil || !att.Acquired {
		t.Fatalf("acquire: %+v, %v", att, err)
	}
	if _, _, err := b.Release(ctx, "busy", "x", 0); err != nil {
		t.Fatal(err)
	}
	tx, err := s.raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var owner string
	if err := tx.QueryRow("SELECT owner FROM "+leasesTable+" WHERE scope = ? AND lock_key = ? FOR UPDATE", s.scope, "busy").Scan(&owner); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i := range 3 * mysqlConns {
		wg.Go(func() { b.TryAcquire(wctx, "busy", fmt.Sprint("waiter", i), time.Minute) }) //nolint:errcheck // they only occupy
	}
	defer func() {
		tx.Rollback()
		wg.Wait()
	}()
	// Wait until the attempts have taken every connection they may.
	deadline := time.Now().Add(10 * time.Second)
	for b.db.Stats().InUse < mysqlConns-4 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d connections in use by blocked attempts", b.db.Stats().InUse)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // and any more that would take one

	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	if _, err := b.Renew(rctx, "mine", "holder", time.Minute); err != nil {
		t.Fatalf("renew while attempts filled the pool: %v", err)
	}
	if _, _, err := b.Release(rctx, "mine", "holder", 0); err != nil {
		t.Fatalf("release while attempts filled the pool: %v", err)
	}
	if st, err := b.Inspect(rctx, "mine"); err != nil || st.Held {
		t.Fatalf("inspect while attempts filled the pool: %+v, %v; want free", st, err)
	}
}
