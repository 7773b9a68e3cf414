package sqllock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// TestRivalsOnOneKey has two owners, each from several goroutines at once (re-entering each
// other's holds), lock and unlock one key: on PostgreSQL every uncontended step is one fused
// statement, and the rivals' attempts meet it on the same row. Two owners must never hold
// at once, no two new leases may share a token, a re-entry must keep its lease's, and once every hold is
// released the key must be free.
func TestRivalsOnOneKey(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s := e.newStore(t)
		bes := []*Backend{s.open(t), s.open(t)} // two instances
		var mu sync.Mutex
		holds := map[string]int{}
		newLeases := map[uint64]bool{} // tokens of new leases (hold count 1)
		var reentries []uint64
		var wg sync.WaitGroup
		for g := range 8 {
			owner := fmt.Sprintf("owner-%d", g%2)
			be := bes[g/2%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 25 {
					att, err := be.TryAcquire(ctx, "one", owner, 10*time.Second)
					if err != nil {
						t.Errorf("%s: acquire: %v", owner, err)
						return
					}
					if !att.Acquired {
						continue
					}
					mu.Lock()
					for other, n := range holds {
						if other != owner && n > 0 {
							t.Errorf("%s acquired (token %d) while %s holds %d", owner, att.Lease.FencingToken, other, n)
						}
					}
					if tok := att.Lease.FencingToken; att.Lease.HoldCount == 1 {
						if newLeases[tok] {
							t.Errorf("%s: a second new lease with token %d", owner, tok)
						}
						newLeases[tok] = true
					} else {
						reentries = append(reentries, tok)
					}
					holds[owner]++
					mu.Unlock()
					mu.Lock()
					holds[owner]--
					mu.Unlock()
					if _, _, err := be.Release(ctx, "one", owner, att.Lease.FencingToken); err != nil {
						t.Errorf("%s: release: %v", owner, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		for _, tok := range reentries {
			if !newLeases[tok] {
				t.Errorf("re-entry with token %d, which no new lease had", tok)
			}
		}
		if st, err := bes[0].Inspect(ctx, "one"); err != nil || st.Held {
			t.Fatalf("after every release: %+v, %v; want free", st, err)
		}
	})
}

// TestLapsedHolderReportedOnce lets a lease lapse unreleased, then has rivals on two
// instances take the key at once: exactly one must get it, and the lapsed lease must be
// reported exactly once, by that one.
func TestLapsedHolderReportedOnce(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s := e.newStore(t)
		bes := []*Backend{s.open(t, Config{ReclaimInterval: Off}), s.open(t, Config{ReclaimInterval: Off})} // no janitor deletes the lapsed row unreported
		var mu sync.Mutex
		var reports []lock.Expiry
		for _, be := range bes {
			be.ReportExpiries(func(x lock.Expiry) { mu.Lock(); reports = append(reports, x); mu.Unlock() })
		}
		for round := range 3 {
			key := fmt.Sprintf("lapsing-%d", round)
			if att, err := bes[0].TryAcquire(ctx, key, "first", time.Minute); err != nil || !att.Acquired {
				t.Fatalf("acquire: %+v, %v", att, err)
			}
			if _, _, err := bes[0].Release(ctx, key, "first", 0); err != nil { // the row has a token now
				t.Fatalf("release: %v", err)
			}
			held, err := bes[0].TryAcquire(ctx, key, "lapsing", 50*time.Millisecond)
			if err != nil || !held.Acquired {
				t.Fatalf("acquire: %+v, %v", held, err)
			}
			time.Sleep(150 * time.Millisecond)
			mu.Lock()
			reports = nil
			mu.Unlock()
			var won sync.WaitGroup
			var winners []uint64
			for g := range 8 {
				won.Add(1)
				go func() {
					defer won.Done()
					att, err := bes[g%2].TryAcquire(ctx, key, fmt.Sprintf("rival-%d", g), time.Minute)
					if err != nil {
						t.Errorf("rival %d: %v", g, err)
					}
					if att.Acquired {
						mu.Lock()
						winners = append(winners, att.Lease.FencingToken)
						mu.Unlock()
					}
				}()
			}
			won.Wait()
			mu.Lock()
			if len(winners) != 1 {
				t.Errorf("round %d: %d rivals acquired (tokens %v), want 1", round, len(winners), winners)
			}
			want := lock.Expiry{Key: key, FencingToken: held.Lease.FencingToken, HolderID: held.Lease.HolderID}
			if len(reports) != 1 || reports[0] != want {
				t.Errorf("round %d: lapsed lease reported %+v, want once: %+v", round, reports, want)
			}
			mu.Unlock()
		}
	})
}

// TestBatchedCASConflicts sends one batch of compare-and-sets on PostgreSQL whose
// expectations conflict: two that expect the same row of one key (one may write, the other
// must then find the row changed), one whose expectation is stale, and one on another key.
// Each must be answered exactly, and the rows must hold what the writers wrote.
func TestBatchedCASConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := postgresStore(t)
	be := s.open(t)
	for _, key := range []string{"x", "y"} {
		if att, err := be.TryAcquire(ctx, key, "a", time.Minute); err != nil || !att.Acquired {
			t.Fatalf("acquire %s: %+v, %v", key, att, err)
		}
	}
	x, _, err := be.peekOne(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	y, _, err := be.peekOne(ctx, "y")
	if err != nil {
		t.Fatal(err)
	}
	free := func(r row) row { return row{token: r.token, expiresAt: r.now + 1000} }
	renewed := func(r row) row { r.expiresAt += 5000; return r }
	stale := x
	stale.holds++
	jobs := []casJob{
		{key: "x", casWrite: casWrite{x, free(x)}},
		{key: "y", casWrite: casWrite{y, renewed(y)}},
		{key: "x", casWrite: casWrite{x, renewed(x)}},
		{key: "x", casWrite: casWrite{stale, free(stale)}},
	}
	res, err := be.runCAS(ctx, jobs)
	if err != nil {
		t.Fatalf("runCAS: %v", err)
	}
	if !res[1].Value || res[3].Value || res[0].Value == res[2].Value {
		t.Fatalf("wrote %v, %v, %v, %v: want y's, exactly one of x's two, and not the stale one", res[0].Value, res[1].Value, res[2].Value, res[3].Value)
	}
	gotX, _, _ := be.peekOne(ctx, "x")
	wantX := jobs[0].next
	if res[2].Value {
		wantX = jobs[2].next
	}
	if gotX.owner != wantX.owner || gotX.holds != wantX.holds || gotX.expiresAt != wantX.expiresAt || gotX.token != wantX.token {
		t.Fatalf("x after the batch: %+v, want the winner's %+v", gotX, wantX)
	}
	if gotY, _, _ := be.peekOne(ctx, "y"); gotY.expiresAt != y.expiresAt+5000 {
		t.Fatalf("y after the batch expires at %d, want %d", gotY.expiresAt, y.expiresAt+5000)
	}
}
