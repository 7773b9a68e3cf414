package sqllock

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
)

// distinctKeys is how many per-entity keys TestFreeKeysLeaveNoRows locks on each engine:
// 100,000 on SQLite, 5,000 under the race detector, which slows the pure-Go SQLite about
// tenfold; 2,000 on MySQL and PostgreSQL, whose rate is the database server's commits (a few hundred key
// acquire+release pairs a second on a loaded dev machine). COORDKIT_TEST_SQL_KEYS overrides
// both; the bound checked does not depend on the count.
func distinctKeys(engine string) int {
	if n, err := strconv.Atoi(os.Getenv("COORDKIT_TEST_SQL_KEYS")); err == nil && n > 0 {
		return n
	}
	switch {
	case engine == "mysql", engine == "postgres":
		return 2_000
	case testenv.Race:
		return 5_000
	}
	return 100_000
}

// TestFreeKeysLeaveNoRows locks and releases many distinct keys, as per-entity locks
// (order:<id>) do, with the background janitor running: afterwards only the fence floors
// remain, a fixed number per scope, however many keys were ever used.
func TestFreeKeysLeaveNoRows(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s := e.newStore(t)
		// Two instances, as a deployment has, both running janitors.
		bs := []*Backend{
			s.open(t, Config{KeepFree: Off, ReclaimInterval: 50 * time.Millisecond}),
			s.open(t, Config{KeepFree: Off, ReclaimInterval: 50 * time.Millisecond}),
		}
		n := distinctKeys(e.name)
		var (
			next   atomic.Int64
			failed atomic.Value
			wg     sync.WaitGroup
		)
		start := time.Now()
		for w := range 8 {
			b := bs[w%len(bs)]
			wg.Go(func() {
				for {
					i := next.Add(1)
					if i > int64(n) || failed.Load() != nil {
						return
					}
					key := fmt.Sprintf("order:%d", i)
					att, err := b.TryAcquire(ctx, key, "o", time.Minute)
					if err == nil && !att.Acquired {
						err = fmt.Errorf("free key %s not acquired: %+v", key, att)
					}
					if err == nil {
						_, _, err = b.Release(ctx, key, "o", 0)
					}
					if err != nil {
						failed.CompareAndSwap(nil, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := failed.Load(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d keys locked and released in %v", n, time.Since(start).Round(time.Millisecond))

		deadline := time.Now().Add(30 * time.Second)
		for s.rows(t) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d released keys still have rows 30s after the last release", s.rows(t), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
		var floors int
		if err := s.raw.QueryRow("SELECT COUNT(*) FROM "+fencesTable+" WHERE scope = ?", s.scope).Scan(&floors); err != nil {
			t.Fatal(err)
		}
		if floors != FenceBuckets {
			t.Fatalf("%d fence floors, want %d", floors, FenceBuckets)
		}
	})
}

// TestTokensRiseAcrossReclaim deletes a key's row between two holders, every way a row gets
// deleted, and checks that the next holder's fencing token is still larger.
func TestTokensRiseAcrossReclaim(t *testing.T) {
	const ttl = 100 * time.Millisecond
	cases := []struct {
		name string
		// end ends the first holder's lease so that its row becomes reclaimable.
		end func(t *testing.T, b *Backend, key string)
	}{
		{name: "released", end: func(t *testing.T, b *Backend, key string) {
			if _, _, err := b.Release(context.Background(), key, "first", 0); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "expired", end: func(t *testing.T, b *Backend, key string) { time.Sleep(ttl + 20*time.Millisecond) }},
	}
	forEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s := e.newStore(t)
		b := s.open(t, Config{KeepFree: Off, ReclaimInterval: Off})
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				key := "reused:" + tc.name
				// Several holders first, so the token is well above anything a fresh floor gives.
				var last uint64
				for i := range 3 {
					att, err := b.TryAcquire(ctx, key, fmt.Sprint("warm", i), time.Minute)
					if err != nil || !att.Acquired {
						t.Fatalf("acquire: %+v, %v", att, err)
					}
					last = att.Lease.FencingToken
					if _, _, err := b.Release(ctx, key, fmt.Sprint("warm", i), 0); err != nil {
						t.Fatal(err)
					}
				}
				att, err := b.TryAcquire(ctx, key, "first", ttl)
				if err != nil || !att.Acquired || att.Lease.FencingToken <= last {
					t.Fatalf("acquire: %+v, %v; want a token above %d", att, err, last)
				}
				first := att.Lease.FencingToken
				tc.end(t, b, key)
				if _, err := b.Reclaim(ctx); err != nil {
					t.Fatalf("reclaim: %v", err)
				}
				if n := s.keyRows(t, key); n != 0 {
					t.Fatalf("key still has its row after Reclaim; the test must see a deleted row")
				}
				att, err = b.TryAcquire(ctx, key, "second", time.Minute)
				if err != nil || !att.Acquired {
					t.Fatalf("re-acquire: %+v, %v", att, err)
				}
				if att.Lease.FencingToken <= first {
					t.Fatalf("token %d after the row was reclaimed, want more than the previous holder's %d",
						att.Lease.FencingToken, first)
				}
			})
		}
	})
}

// TestJanitorReclaimsUntouched leaves expired leases and the placeholder rows of interrupted
// acquires where nobody touches them again: the background janitor deletes them.
func TestJanitorReclaimsUntouched(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s := e.newStore(t)
		b := s.open(t, Config{ReclaimInterval: 50 * time.Millisecond})
		for i := range 100 {
			if att, err := b.TryAcquire(ctx, fmt.Sprint("crashed:", i), "o", 100*time.Millisecond); err != nil || !att.Acquired {
				t.Fatalf("acquire: %+v, %v", att, err)
			}
		}
		// What an acquire leaves when it stops between creating the row and taking it.
		for i := range 100 {
			s.exec(t, "INSERT INTO "+leasesTable+" (scope, lock_key, expires_at) VALUES (?, ?, "+b.d.NowMillis+" - 1)",
				s.scope, fmt.Sprint("placeholder:", i))
		}
		// A live lease stays.
		if att, err := b.TryAcquire(ctx, "live", "o", time.Minute); err != nil || !att.Acquired {
			t.Fatalf("acquire: %+v, %v", att, err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for s.rows(t) > 1 {
			if time.Now().After(deadline) {
				t.Fatalf("%d rows 20s later, want only the live lease's", s.rows(t))
			}
			time.Sleep(20 * time.Millisecond)
		}
		if st, err := b.Inspect(ctx, "live"); err != nil || !st.Held {
			t.Fatalf("the janitor touched a live lease: %+v, %v", st, err)
		}
	})
}

// TestConcurrentJanitors runs Reclaim from three instances without pause while workers lock
// and release a few keys through them with reclamation at once (keep-free 0): every
// holder of a key must get a larger token than the one before, and rows must really be
// deleted under them.
func TestConcurrentJanitors(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := e.newStore(t)
		var bs []*Backend
		for range 3 {
			bs = append(bs, s.open(t, Config{KeepFree: Off, ReclaimInterval: Off}))
		}
		const keys = 6
		var (
			mu      sync.Mutex
			tokens  [keys][]uint64 // per key, in the order holders got it
			deleted atomic.Int64
			errs    = make(chan error, 16)
			wg, jwg sync.WaitGroup
		)
		report := func(err error) {
			select {
			case errs <- err:
			default:
			}
		}
		for _, b := range bs {
			jwg.Go(func() {
				for ctx.Err() == nil {
					n, err := b.Reclaim(ctx)
					if err != nil && ctx.Err() == nil {
						report(fmt.Errorf("reclaim: %w", err))
						return
					}
					deleted.Add(int64(n))
				}
			})
		}
		var (
			acquires atomic.Int64
			done     atomic.Bool
		)
		for w := range 6 {
			b := bs[w%len(bs)]
			wg.Go(func() {
				owner := fmt.Sprint("w", w)
				for i := 0; !done.Load(); i++ {
					k := (w + i) % keys
					key := fmt.Sprint("k", k)
					att, err := b.TryAcquire(ctx, key, owner, time.Minute)
					if err != nil {
						report(fmt.Errorf("acquire: %w", err))
						return
					}
					if !att.Acquired {
						continue
					}
					mu.Lock() // under the lock: the list is in holder order
					tokens[k] = append(tokens[k], att.Lease.FencingToken)
					mu.Unlock()
					acquires.Add(1)
					if _, _, err := b.Release(ctx, key, owner, 0); err != nil {
						report(fmt.Errorf("release: %w", err))
						return
					}
				}
			})
		}
		// Run for a few seconds, longer on a slow machine until the race was exercised.
		start := time.Now()
		for time.Since(start) < 3*time.Second || (acquires.Load() < 200 || deleted.Load() < 50) && time.Since(start) < 60*time.Second {
			time.Sleep(50 * time.Millisecond)
		}
		done.Store(true)
		wg.Wait()
		cancel()
		jwg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		total := 0
		for k, ts := range tokens {
			total += len(ts)
			for i := 1; i < len(ts); i++ {
				if ts[i] <= ts[i-1] {
					t.Fatalf("key k%d: holder %d got token %d after %d (tokens %v)", k, i, ts[i], ts[i-1], ts)
				}
			}
		}
		if deleted.Load() < 50 || total < 200 {
			t.Fatalf("%d rows reclaimed under %d acquires: the race was not exercised", deleted.Load(), total)
		}
		t.Logf("%d acquires, %d rows reclaimed under them", total, deleted.Load())
	})
}

// TestCloseStopsJanitor closes a backend whose janitor runs every millisecond on a database
// its caller keeps open: afterwards a reclaimable row must stay.
func TestCloseStopsJanitor(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine) {
		s := e.newStore(t)
		b := s.open(t, Config{ReclaimInterval: time.Millisecond})
		owned := b.owned
		b.owned = nil // the test keeps the database open to see what runs after Close
		t.Cleanup(func() { owned.Close() })
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		s.exec(t, "INSERT INTO "+leasesTable+" (scope, lock_key, expires_at) VALUES (?, 'after-close', 0)", s.scope)
		time.Sleep(200 * time.Millisecond)
		if s.keyRows(t, "after-close") != 1 {
			t.Fatal("a closed backend's janitor deleted a row")
		}
	})
}
