package sqllock

import (
	"context"
	"fmt"
	"github.com/coordkit/coordkit/services/lock"
	"sync"
	"testing"
	"time"
)

// call is one backend operation of a fused test.
type call struct {
	kind  fusedKind
	owner string
	ttl   time.Duration
	token uint64
	lapse bool // instead of an operation, wait until leases of 50ms lapsed
}

// do runs c on key through be and formats its answer.
func (c call) do(ctx context.Context, be *Backend, key string) string {
	switch {
	case c.lapse:
		time.Sleep(150 * time.Millisecond)
		return ""
	case c.kind == fusedAcquire:
		att, err := be.TryAcquire(ctx, key, c.owner, c.ttl)
		return fmt.Sprintf("acquired %v holds %d token %d, held by other %v token %d / %v",
			att.Acquired, att.Lease.HoldCount, att.Lease.FencingToken, att.Holder.Held, att.Holder.FencingToken, err)
	case c.kind == fusedRelease:
		n, rel, err := be.Release(ctx, key, c.owner, c.token)
		return fmt.Sprintf("remaining %d token %d / %v", n, rel.FencingToken, err)
	default:
		l, err := be.Renew(ctx, key, c.owner, c.ttl)
		return fmt.Sprintf("holds %d token %d / %v", l.HoldCount, l.FencingToken, err)
	}
}

// op is c as a fused operation on key.
func (c call) op(key string) fusedOp {
	return fusedOp{kind: c.kind, key: key, owner: c.owner, holder: "new-holder", ttlMs: ceilMillis(c.ttl), token: c.token}
}

// TestFusedDecidesAsPlain runs each operation on PostgreSQL on keys prepared alike: through
// the fused statement alone, through the backend, and through a backend with fused writes
// off (plain read, compare-and-set or transaction). The fused statement must write exactly
// when the case says it decides (otherwise the plain path does), and both backends must
// answer alike and leave the same row (its expiry measured from the clock it read).
func TestFusedDecidesAsPlain(t *testing.T) {
	t.Parallel()
	const a, b = "owner-a", "owner-b"
	acq := func(owner string, ttl time.Duration) call { return call{kind: fusedAcquire, owner: owner, ttl: ttl} }
	rel := func(owner string, token uint64) call { return call{kind: fusedRelease, owner: owner, token: token} }
	ren := func(owner string, ttl time.Duration) call { return call{kind: fusedRenew, owner: owner, ttl: ttl} }
	lapse := call{lapse: true}
	short := 50 * time.Millisecond
	tests := []struct {
		name  string
		setup []call
		op    call
		fused bool // the fused statement writes
	}{
		{name: "acquire a free row", setup: []call{acq(a, time.Minute), rel(a, 0)}, op: acq(b, time.Minute), fused: true},
		{name: "re-enter", setup: []call{acq(a, time.Minute)}, op: acq(a, 30*time.Second), fused: true},
		{name: "take over a lapsed lease", setup: []call{acq(a, short), lapse}, op: acq(b, time.Minute), fused: true},
		{name: "own lapsed lease: a new one", setup: []call{acq(a, short), lapse}, op: acq(a, time.Minute), fused: true},
		{name: "held by another", setup: []call{acq(a, time.Minute)}, op: acq(b, time.Minute)},
		{name: "first acquire (no row)", op: acq(a, time.Minute)},
		{name: "release the last hold", setup: []call{acq(a, time.Minute)}, op: rel(a, 0), fused: true},
		{name: "release one of two holds", setup: []call{acq(a, time.Minute), acq(a, time.Minute)}, op: rel(a, 0), fused: true},
		{name: "release with the token", setup: []call{acq(a, time.Minute)}, op: rel(a, 1), fused: true},
		{name: "release with a wrong token", setup: []call{acq(a, time.Minute)}, op: rel(a, 7)},
		{name: "release by another", setup: []call{acq(a, time.Minute)}, op: rel(b, 0)},
		{name: "release a lapsed lease", setup: []call{acq(a, short), lapse}, op: rel(a, 0)},
		{name: "renew for a new ttl", setup: []call{acq(a, time.Minute)}, op: ren(a, 2*time.Minute), fused: true},
		{name: "renew for its own ttl", setup: []call{acq(a, 90*time.Second)}, op: ren(a, 0), fused: true},
		{name: "renew by another", setup: []call{acq(a, time.Minute)}, op: ren(b, time.Minute)},
		{name: "renew a lapsed lease", setup: []call{acq(a, short), lapse}, op: ren(a, time.Minute)},
	}
	ctx := context.Background()
	s := postgresStore(t)
	fusedBe, plainBe := s.open(t), s.open(t)
	plainBe.d.FusedWrites = false
	var wg sync.WaitGroup
	for i, tt := range tests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys := [3]string{}
			for j := range keys {
				keys[j] = fmt.Sprintf("case-%d-%d", i, j)
				for _, c := range tt.setup {
					c.do(ctx, plainBe, keys[j])
				}
			}
			if _, applied, err := fusedBe.fuse(ctx, tt.op.op(keys[2])); err != nil || applied != tt.fused {
				t.Errorf("%s: fused statement wrote %v (%v), want %v", tt.name, applied, err, tt.fused)
			}
			var answers [2]string
			var rows [2]row
			for j, be := range []*Backend{fusedBe, plainBe} {
				answers[j] = tt.op.do(ctx, be, keys[j])
				r, _, err := be.peekOne(ctx, keys[j])
				if err != nil {
					t.Errorf("%s: read: %v", tt.name, err)
					return
				}
				rows[j] = r
			}
			if answers[0] != answers[1] {
				t.Errorf("%s: fused backend answered %q, plain %q", tt.name, answers[0], answers[1])
			}
			f, p := rows[0], rows[1]
			if f.owner != p.owner || f.holds != p.holds || f.token != p.token || f.ttlMs != p.ttlMs || (f.holder == "") != (p.holder == "") {
				t.Errorf("%s: fused backend left %+v, plain %+v", tt.name, f, p)
			}
			// Expiries are reckoned from clocks read apart: equal up to the time between.
			if d := (f.expiresAt - f.now) - (p.expiresAt - p.now); d > 2000 || d < -2000 {
				t.Errorf("%s: fused backend left a row expiring in %d ms, plain in %d ms", tt.name, f.expiresAt-f.now, p.expiresAt-p.now)
			}
		}()
	}
	wg.Wait()
}

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
		bes := []*Backend{s.open(t), s.open(t)}
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
