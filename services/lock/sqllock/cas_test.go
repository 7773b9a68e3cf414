package sqllock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// TestCASWritesOnlyTheRowAsRead reads a row, lets something happen to it, then writes a
// decision made on the read by compare-and-set: it must write only when the row is still
// as read, with its lease as live (or lapsed) as read, and otherwise leave the row as the
// change left it.
func TestCASWritesOnlyTheRowAsRead(t *testing.T) {
	const a, b = "owner-a", "owner-b"
	tests := []struct {
		name string
		// setup prepares the key before the read; between runs after it.
		setup, between func(t *testing.T, be *Backend, key string)
		// decide is the decision made on the read.
		decide    func(r row) row
		wantWrote bool
		// wantOwner is who holds the key afterwards ("" free).
		wantOwner string
	}{
		{
			name:      "unchanged: a takes a free row",
			setup:     acquireRelease(a),
			decide:    takeBy(a),
			wantWrote: true, wantOwner: a,
		},
		{
			name:      "taken by b meanwhile",
			setup:     acquireRelease(a),
			between:   acquire(b, time.Minute),
			decide:    takeBy(a),
			wantOwner: b,
		},
		{
			name:      "released meanwhile",
			setup:     acquire(a, time.Minute),
			between:   release(a),
			decide:    renewBy(a),
			wantOwner: "",
		},
		{
			name:      "renewed meanwhile",
			setup:     acquire(a, time.Minute),
			between:   func(t *testing.T, be *Backend, key string) { time.Sleep(5 * time.Millisecond); renew(a)(t, be, key) },
			decide:    freeRow,
			wantOwner: a,
		},
		{
			// The row is unchanged, but the lease read as live has lapsed: a release decided
			// on the read must not be written (it would report a lease that ran out as
			// released).
			// The lease must still be live at the read, however slow the machine: 2s of it.
			name:      "lapsed meanwhile",
			setup:     acquire(a, 2*time.Second),
			between:   func(*testing.T, *Backend, string) { time.Sleep(2300 * time.Millisecond) },
			decide:    freeRow,
			wantOwner: "", // lapsed: nobody holds it, a's row stays as it was
		},
		{
			name: "read lapsed, still lapsed: b takes over",
			setup: func(t *testing.T, be *Backend, key string) {
				acquire(a, 20*time.Millisecond)(t, be, key)
				time.Sleep(100 * time.Millisecond)
			},
			decide:    takeBy(b),
			wantWrote: true, wantOwner: b,
		},
		{
			name:  "deleted meanwhile",
			setup: acquireRelease(a),
			between: func(t *testing.T, be *Backend, key string) {
				if _, err := be.db.Exec("DELETE FROM "+leasesTable+" WHERE scope = ? AND lock_key = ?", be.scope, key); err != nil {
					t.Fatal(err)
				}
			},
			decide:    takeBy(a),
			wantOwner: "",
		},
	}
	forEngine(t, func(t *testing.T, e engine) {
		be := e.newStore(t).open(t, Config{ReclaimInterval: Off})
		ctx := context.Background()
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				key := fmt.Sprint("cas-", i)
				tt.setup(t, be, key)
				r, found, err := be.peek(ctx, key)
				if err != nil || !found {
					t.Fatalf("read: %+v found=%v %v", r, found, err)
				}
				if tt.between != nil {
					tt.between(t, be, key)
				}
				before, _, _ := be.peek(ctx, key)
				wrote, err := be.casRow(ctx, key, r, tt.decide(r))
				if err != nil {
					t.Fatalf("casRow: %v", err)
				}
				if wrote != tt.wantWrote {
					t.Fatalf("casRow wrote = %v, want %v", wrote, tt.wantWrote)
				}
				after, found, err := be.peek(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if got := holderOf(after); got != tt.wantOwner {
					t.Fatalf("held by %q after, want %q (row %+v)", got, tt.wantOwner, after)
				}
				if !wrote && found && (after.owner != before.owner || after.token != before.token || after.expiresAt != before.expiresAt) {
					t.Fatalf("row changed by a compare-and-set that did not write: %+v, then %+v", before, after)
				}
			})
		}
	})
}

func holderOf(r row) string {
	if !r.held() {
		return ""
	}
	return r.owner
}

func takeBy(owner string) func(r row) row {
	return func(r row) row {
		return row{owner: owner, holder: "h-" + owner, holds: 1, token: r.token + 1, expiresAt: expiry(r.now, 60_000), ttlMs: 60_000}
	}
}

func renewBy(owner string) func(r row) row {
	return func(r row) row {
		return row{owner: owner, holder: r.holder, holds: r.holds, token: r.token, expiresAt: expiry(r.now, 60_000), ttlMs: 60_000}
	}
}

func freeRow(r row) row { return row{token: r.token, expiresAt: r.now + 10_000} }

func acquire(owner string, ttl time.Duration) func(t *testing.T, be *Backend, key string) {
	return func(t *testing.T, be *Backend, key string) {
		t.Helper()
		if att, err := be.TryAcquire(context.Background(), key, owner, ttl); err != nil || !att.Acquired {
			t.Fatalf("%s acquire %s: %+v, %v", owner, key, att, err)
		}
	}
}

func release(owner string) func(t *testing.T, be *Backend, key string) {
	return func(t *testing.T, be *Backend, key string) {
		t.Helper()
		if _, _, err := be.Release(context.Background(), key, owner, 0); err != nil {
			t.Fatalf("%s release %s: %v", owner, key, err)
		}
	}
}

func renew(owner string) func(t *testing.T, be *Backend, key string) {
	return func(t *testing.T, be *Backend, key string) {
		t.Helper()
		if _, err := be.Renew(context.Background(), key, owner, time.Minute); err != nil {
			t.Fatalf("%s renew %s: %v", owner, key, err)
		}
	}
}

func acquireRelease(owner string) func(t *testing.T, be *Backend, key string) {
	return func(t *testing.T, be *Backend, key string) {
		t.Helper()
		acquire(owner, time.Minute)(t, be, key)
		release(owner)(t, be, key)
	}
}

// TestCASRivalsOnOneKey attacks the compare-and-set paths with many owners on one key, each
// from two backends (two service instances): every grant must be exclusive, with a token
// above every earlier one, and every holder's Release must succeed.
func TestCASRivalsOnOneKey(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		s := e.newStore(t)
		backends := []*Backend{s.open(t), s.open(t)}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		const owners, grantsEach = 6, 25
		var (
			holder    atomic.Value // owner holding, or ""
			lastToken atomic.Uint64
			wg        sync.WaitGroup
			errs      = make(chan error, owners)
		)
		fail := func(err error) {
			errs <- err
			cancel() // the others would wait for a lock this owner may keep
		}
		holder.Store("")
		for i := range owners {
			be := backends[i%len(backends)]
			owner := fmt.Sprintf("rival-owner-%02d", i)
			wg.Go(func() {
				for grants := 0; grants < grantsEach; {
					att, err := be.TryAcquire(ctx, "hot", owner, time.Minute)
					if err != nil {
						if ctx.Err() == nil || len(errs) == 0 {
							fail(fmt.Errorf("%s acquire: %w", owner, err))
						}
						return
					}
					if !att.Acquired {
						continue
					}
					grants++
					if !holder.CompareAndSwap("", owner) {
						fail(fmt.Errorf("%s granted while %v held it", owner, holder.Load()))
						return
					}
					if tok := att.Lease.FencingToken; tok <= lastToken.Load() {
						fail(fmt.Errorf("%s granted token %d after %d", owner, tok, lastToken.Load()))
						return
					} else {
						lastToken.Store(tok)
					}
					holder.Store("")
					if left, _, err := be.Release(ctx, "hot", owner, att.Lease.FencingToken); err != nil || left != 0 {
						fail(fmt.Errorf("%s release: %d left, %w", owner, left, err))
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// TestCASSameOwnerReenters has one owner re-enter and release a lock it holds from many
// goroutines and two backends at once, while a rival tries all the while: hold counts
// changed by compare-and-set must add up (none lost to a concurrent change), the rival
// must never get the lock, and the owner's first hold must be the one left.
func TestCASSameOwnerReenters(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		s := e.newStore(t)
		backends := []*Backend{s.open(t), s.open(t)}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		const owner, rival = "the-same-owner-01", "the-rival-owner-01"
		first, err := backends[0].TryAcquire(ctx, "hot", owner, time.Minute)
		if err != nil || !first.Acquired {
			t.Fatalf("first hold: %+v, %v", first, err)
		}
		stop := make(chan struct{})
		var rivalErr atomic.Value
		var rivalWG sync.WaitGroup
		rivalWG.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				att, err := backends[1].TryAcquire(ctx, "hot", rival, time.Minute)
				if err != nil || att.Acquired {
					rivalErr.Store(fmt.Sprintf("rival's attempt: %+v, %v", att, err))
					return
				}
			}
		})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 8 {
			be := backends[i%2]
			wg.Go(func() {
				for range 20 {
					att, err := be.TryAcquire(ctx, "hot", owner, time.Minute)
					if err != nil || !att.Acquired || att.Lease.FencingToken != first.Lease.FencingToken {
						errs <- fmt.Errorf("re-entry: %+v, %v", att, err)
						return
					}
					if _, _, err := be.Release(ctx, "hot", owner, 0); err != nil {
						errs <- fmt.Errorf("release of a re-entry: %w", err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		rivalWG.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if v := rivalErr.Load(); v != nil {
			t.Error(v)
		}
		st, err := backends[0].Inspect(ctx, "hot")
		if err != nil || !st.Held || st.HoldCount != 1 || st.FencingToken != first.Lease.FencingToken {
			t.Fatalf("after the re-entries: %+v, %v; want the first hold alone", st, err)
		}
		left, _, err := backends[1].Release(ctx, "hot", owner, first.Lease.FencingToken)
		if err != nil || left != 0 {
			t.Fatalf("last release: %d left, %v", left, err)
		}
		if _, _, err := backends[0].Release(ctx, "hot", owner, 0); !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("release after the last: %v, want ErrNotHeld", err)
		}
	})
}

// TestDeadlineInBatchedReadIsTheCallers: callers whose deadline passes while their read is
// batched with others' must get deadline exceeded, as a read of their own would, never
// "backend unavailable" (the batch's own timer for the same deadline may fire first).
func TestDeadlineInBatchedReadIsTheCallers(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		be := e.newStore(t).open(t, Config{ReclaimInterval: Off})
		var wrong atomic.Int64
		var sample atomic.Value
		for round := range 20 {
			deadline := time.Now().Add(time.Duration(20+round%7) * time.Millisecond)
			var wg sync.WaitGroup
			for i := range 32 {
				wg.Go(func() {
					ctx, cancel := context.WithDeadline(context.Background(), deadline)
					defer cancel()
					for {
						_, err := be.Inspect(ctx, fmt.Sprint("dl-", i%20))
						if err == nil {
							continue
						}
						if !errors.Is(err, context.DeadlineExceeded) {
							wrong.Add(1)
							sample.Store(err.Error())
						}
						return
					}
				})
			}
			wg.Wait()
		}
		if n := wrong.Load(); n > 0 {
			t.Fatalf("%d callers past their deadline got another error, e.g. %v", n, sample.Load())
		}
	})
}
