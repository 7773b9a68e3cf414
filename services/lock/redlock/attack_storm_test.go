//go:build redlock_attack

// Attacks on Redlock that still find holes, kept out of the default test run so CI stays
// meaningful: run them with
//
//	go test -tags redlock_attack -race -run Attack ./services/lock/redlock/
//
// Known open (see Redlock in docs/backends.md): a lease that lives on exactly a majority
// (a node was down when it was taken) loses exclusion to one more node's drift or data loss
// under faults.

package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// The storm tests run one owner from many goroutines across several backend instances,
// mixing first acquires, re-entries and releases, while a rival keeps trying, and record
// every call with the moments it started and returned. The checks then use only what the
// calls promised:
//
//   - a hold is certain from the moment its acquire returned until its release was called
//     or its reported ExpiresAt, whichever is first; no call of another owner may acquire
//     within a window certain for a hold (exclusion);
//   - a new holder's token is above every token returned before its call began; a
//     re-entry's is not below (fencing);
//   - with no fault and no expiry: a call's hold count is at least the holds certain during
//     the call and at most the holds that may have existed during it (exact counts), and no
//     lock state is left once every hold is released.

// call is one recorded TryAcquire and, when it acquired, its Release.
type call struct {
	rival              bool
	acqStart, acqEnd   time.Time
	acquired           bool
	err                error
	token              uint64
	count              uint32
	expires            time.Time
	released           bool // Release was called (relStart set)
	relStart, relEnd   time.Time
	left               uint32
	relErr             error
	relDone            bool
	abandonedAfterTime bool       // kept past its validity: never released
	holder             lock.State // who held the lock when it was busy
}

// journal collects the calls of one storm.
type journal struct {
	mu    sync.Mutex
	calls []*call
	began time.Time
	notes []string // faults injected, with their moment in the storm
}

// note records a fault injected now.
func (j *journal) note(what string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.notes = append(j.notes, fmt.Sprintf("%s at +%v", what, time.Since(j.began).Round(time.Millisecond)))
}

// rel is a moment as an offset into the storm, for messages.
func (j *journal) rel(at time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return "+" + at.Sub(j.began).Round(10*time.Microsecond).String()
}

func (j *journal) add(c *call) {
	j.mu.Lock()
	j.calls = append(j.calls, c)
	j.mu.Unlock()
}

// stormConfig shapes a storm.
type stormConfig struct {
	owners   int           // goroutines of the owner
	backends int           // backend instances they spread over
	ttl      time.Duration // every lease's ttl
	dur      time.Duration
	// longHold is the share of holds kept past the ttl (then abandoned, never released).
	longHold float64
	// cfg configures the backends (NodeTimeout).
	cfg Config
	// fault, when set, runs alongside the storm with the storm's context, noting what it
	// does in the journal.
	fault func(ctx context.Context, j *journal)
	// depth is the most holds one goroutine keeps at once.
	depth int
	// base: one hold of the owner is taken before the storm and released after it.
	base bool
}

const owner, rivalOwner = "me", "rival"

// runStorm runs a storm on key and returns its journal.
func runStorm(t *testing.T, c *cluster, key string, sc stormConfig) *journal {
	t.Helper()
	var bs []*Backend
	for range sc.backends {
		bs = append(bs, c.openWith(sc.cfg))
	}
	rivalB := c.openWith(sc.cfg)
	began := time.Now()
	j := &journal{began: began}
	ctx, cancel := context.WithTimeout(context.Background(), sc.dur)
	defer cancel()
	var wg sync.WaitGroup
	if sc.fault != nil {
		wg.Go(func() { sc.fault(ctx, j) })
	}
	// margin keeps releases well inside a hold's validity, so a release never lands on a later
	// lease of the same owner (which would be the caller's bug, not the backend's).
	margin := sc.ttl / 3
	release := func(b *Backend, who string, cl *call) {
		if time.Until(cl.expires) < margin {
			cl.abandonedAfterTime = true
			return
		}
		j.mu.Lock()
		cl.released, cl.relStart = true, time.Now()
		j.mu.Unlock()
		left, _, err := b.Release(context.Background(), key, who, 0)
		j.mu.Lock()
		cl.relEnd, cl.left, cl.relErr, cl.relDone = time.Now(), left, err, true
		j.mu.Unlock()
	}
	acquire := func(b *Backend, who string) *call {
		cl := &call{rival: who == rivalOwner, acqStart: time.Now()}
		att, err := b.TryAcquire(context.Background(), key, who, sc.ttl)
		cl.acqEnd, cl.err = time.Now(), err
		cl.holder = att.Holder
		if err == nil && att.Acquired {
			cl.acquired, cl.token, cl.count, cl.expires = true, att.Lease.FencingToken, att.Lease.HoldCount, att.Lease.ExpiresAt
		}
		j.add(cl)
		return cl
	}
	hold := func(r *rand.Rand) {
		switch {
		case r.Float64() < sc.longHold:
			time.Sleep(sc.ttl + sc.ttl/4)
		case r.IntN(4) == 0:
			time.Sleep(time.Duration(r.IntN(1000)) * time.Microsecond)
		}
	}
	var base *call
	if sc.base {
		if base = acquire(bs[0], owner); !base.acquired {
			t.Fatalf("setup: base hold: %v", base.err)
		}
	}
	for g := range sc.owners {
		b := bs[g%len(bs)]
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			var stack []*call
			for ctx.Err() == nil {
				// Every goroutine winds down in the first 20ms of every 100ms, so that the
				// lock goes free, first acquires race with re-entries and the rival gets
				// its turns.
				if phase := time.Since(began) % (100 * time.Millisecond); phase < 20*time.Millisecond {
					if len(stack) == 0 {
						time.Sleep(20*time.Millisecond - phase + time.Duration(r.IntN(2000))*time.Microsecond)
						continue
					}
				} else if len(stack) == 0 || len(stack) < sc.depth && r.IntN(2) == 0 {
					if cl := acquire(b, owner); cl.acquired {
						stack = append(stack, cl)
						hold(r)
					} else {
						time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
					}
					continue
				}
				release(b, owner, stack[len(stack)-1])
				stack = stack[:len(stack)-1]
				if len(stack) == 0 && r.IntN(2) == 0 {
					time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
				}
			}
			for i := len(stack) - 1; i >= 0; i-- {
				release(b, owner, stack[i])
			}
		})
	}
	wg.Go(func() {
		r := rand.New(rand.NewPCG(99, uint64(time.Now().UnixNano())))
		for ctx.Err() == nil {
			if cl := acquire(rivalB, rivalOwner); cl.acquired {
				hold(r)
				release(rivalB, rivalOwner, cl)
			}
			time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
		}
	})
	wg.Wait()
	if base != nil {
		release(bs[0], owner, base)
	}
	return j
}

// summary logs what a storm did.
func (j *journal) summary(t *testing.T) (errs int) {
	t.Helper()
	var acq, rivalAcq, busy, rel, relErr int
	for _, c := range j.calls {
		switch {
		case c.err != nil:
			errs++
		case c.acquired && c.rival:
			rivalAcq++
		case c.acquired:
			acq++
		default:
			busy++
		}
		if c.relDone {
			rel++
			if c.relErr != nil {
				relErr++
				errs++
			}
		}
	}
	t.Logf("storm: %d calls: owner acquired %d, rival acquired %d, busy %d, errors %d; releases %d (%d failed)",
		len(j.calls), acq, rivalAcq, busy, errs-relErr, rel, relErr)
	shown := map[string]bool{}
	for _, c := range j.calls {
		for _, err := range []error{c.err, c.relErr} {
			if err != nil && len(shown) < 3 && !shown[err.Error()[:min(60, len(err.Error()))]] {
				shown[err.Error()[:min(60, len(err.Error()))]] = true
				t.Logf("for example: %v", err)
			}
		}
	}
	return errs
}

// certainEnd is the end of the window in which c's hold is certain.
func (c *call) certainEnd() time.Time {
	end := c.expires
	if c.released && c.relStart.Before(end) {
		end = c.relStart
	}
	return end
}

// checkExclusion lists the holds of one owner whose certain window meets a certain window of
// a hold of the other: both owners held the lock at that moment.
func checkExclusion(j *journal) []string {
	type window struct {
		from, to time.Time
		c        *call
	}
	var mine, theirs []window
	for _, c := range j.calls {
		if !c.acquired {
			continue
		}
		w := window{c.acqEnd, c.certainEnd(), c}
		if w.to.Before(w.from) {
			continue // released, or expired, before its acquire returned: never certain
		}
		if c.rival {
			theirs = append(theirs, w)
		} else {
			mine = append(mine, w)
		}
	}
	// The owner's windows sorted by start, with the window of the latest end so far: the one
	// to test against a rival window that starts no earlier.
	slices.SortFunc(mine, func(a, b window) int { return a.from.Compare(b.from) })
	best := make([]int, len(mine))
	for i, w := range mine {
		best[i] = i
		if i > 0 && mine[best[i-1]].to.After(w.to) {
			best[i] = best[i-1]
		}
	}
	var bad []string
	for _, r := range theirs {
		i, _ := slices.BinarySearchFunc(mine, r.to, func(w window, x time.Time) int {
			if w.from.After(x) {
				return 1
			}
			return -1
		})
		if i == 0 || mine[best[i-1]].to.Before(r.from) {
			continue
		}
		o, c := mine[best[i-1]].c, r.c
		bad = append(bad, fmt.Sprintf("two owners: the rival held the lock (token %d, acquire %s-%s, release called %s) "+
			"while the owner certainly held it (token %d, count %d, acquire %s-%s, release called %s, returned %s: %d left, %v); faults: %v",
			c.token, j.rel(c.acqStart), j.rel(c.acqEnd), j.rel(c.relStart),
			o.token, o.count, j.rel(o.acqStart), j.rel(o.acqEnd), j.rel(o.relStart), j.rel(o.relEnd), o.left, o.relErr, j.notes))
	}
	return bad
}

// checkLostHolds lists the holds whose release, done within their validity, heard that the
// lock was not held or held by another owner: a majority of nodes had dropped a hold
// nobody released.
func checkLostHolds(j *journal) []string {
	var bad []string
	for _, c := range j.calls {
		if c.relDone && c.relEnd.Before(c.expires) && (errors.Is(c.relErr, lock.ErrNotHeld) || errors.Is(c.relErr, lock.ErrNotOwner)) {
			bad = append(bad, fmt.Sprintf("hold lost: %s's hold (token %d, count %d, acquired %s-%s, valid until %s) released at %s: %v; faults: %v",
				who(c), c.token, c.count, j.rel(c.acqStart), j.rel(c.acqEnd), j.rel(c.expires), j.rel(c.relStart), c.relErr, j.notes))
		}
	}
	return bad
}

func who(c *call) string {
	if c.rival {
		return "the rival"
	}
	return "the owner"
}

// report fails t with the first few problems a check found.
func report(t *testing.T, problems []string) {
	t.Helper()
	for i, p := range problems {
		if i == 5 {
			t.Errorf("... %d problems in all", len(problems))
			break
		}
		t.Error(p)
	}
}

// checkTokens lists new holders whose token is not above every token returned before their
// call began, and re-entries whose token is below.
func checkTokens(j *journal) []string {
	var got []*call
	for _, c := range j.calls {
		if c.acquired {
			got = append(got, c)
		}
	}
	byEnd := slices.Clone(got)
	slices.SortFunc(byEnd, func(a, b *call) int { return a.acqEnd.Compare(b.acqEnd) })
	maxTok := make([]uint64, len(byEnd))
	for i, c := range byEnd {
		maxTok[i] = c.token
		if i > 0 {
			maxTok[i] = max(maxTok[i], maxTok[i-1])
		}
	}
	var bad []string
	for _, c := range got {
		i, _ := slices.BinarySearchFunc(byEnd, c.acqStart, func(x *call, at time.Time) int {
			if x.acqEnd.Before(at) {
				return -1
			}
			return 1
		})
		if i == 0 {
			continue
		}
		before := maxTok[i-1]
		if c.rival && c.token <= before || !c.rival && c.token < before {
			bad = append(bad, fmt.Sprintf("fencing: %s got token %d after a call had returned token %d", who(c), c.token, before))
		}
	}
	return bad
}

// checkCounts lists the owner's acquires and releases whose hold count no order of the
// concurrent calls explains: below the holds certain throughout the call, or above the holds
// that may have existed during it. Only for storms with no fault and no expiry.
func checkCounts(j *journal) []string {
	type span struct {
		certFrom, certTo int64 // certain window; certFrom > certTo when none
		mayFrom, mayTo   int64 // when the hold may have existed
	}
	ns := func(x time.Time) int64 { return x.UnixNano() }
	var calls []*call
	var spans []span
	for _, c := range j.calls {
		if c.rival {
			continue
		}
		s := span{certFrom: 1, certTo: 0, mayFrom: ns(c.acqStart), mayTo: ns(c.acqEnd)}
		if c.acquired {
			s.certFrom, s.certTo = ns(c.acqEnd), math.MaxInt64
			s.mayTo = math.MaxInt64
			if c.released {
				s.certTo = ns(c.relStart)
				if c.relDone {
					s.mayTo = ns(c.relEnd)
				}
			}
		}
		calls = append(calls, c)
		spans = append(spans, s)
	}
	bounds := func(self int, from, to int64) (certain, may int) {
		for i, s := range spans {
			if i == self {
				continue
			}
			if s.certFrom <= from && s.certTo >= to {
				certain++
			}
			if s.mayFrom <= to && s.mayTo >= from {
				may++
			}
		}
		return certain, may
	}
	var bad []string
	report := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	for i, c := range calls {
		if c.acquired {
			certain, may := bounds(i, ns(c.acqStart), ns(c.acqEnd))
			if n := int(c.count); n < 1+certain || n > 1+may {
				report("acquire at %v reported hold count %d; the owner had %d certain and at most %d other holds during the call",
					c.acqStart.Format("15:04:05.000000"), n, certain, may)
			}
		}
		if c.relDone && c.relErr == nil {
			certain, may := bounds(i, ns(c.relStart), ns(c.relEnd))
			if n := int(c.left); n < certain || n > may {
				report("release at %v reported %d holds left; the owner had %d certain and at most %d other holds during the call",
					c.relStart.Format("15:04:05.000000"), n, certain, may)
			}
		}
	}
	return bad
}

// wantFree fails unless key is free and leaves nothing but slot counters on every node.
func wantFree(t *testing.T, c *cluster, key string) {
	t.Helper()
	if left := c.leftovers(); len(left) > 0 {
		t.Errorf("every hold released, no fault: lock state left behind: %v", left)
	}
	b := c.hooked(nil)
	att, err := b.TryAcquire(context.Background(), key, "after", time.Minute)
	if err != nil || !att.Acquired {
		t.Errorf("every hold released: a new owner's TryAcquire = %+v, %v; want acquired", att, err)
	}
}

// TestAttackStormSameOwnerAndRival: 8 goroutines of one owner over 3 backend instances
// acquire, re-enter and release in random order while a rival tries; no fault, no expiry.
func TestAttackStormSameOwnerAndRival(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	j := runStorm(t, c, "storm", stormConfig{
		owners: 8, backends: 3, ttl: 30 * time.Second, dur: 4 * time.Second, depth: 3,
		cfg: Config{NodeTimeout: time.Second},
	})
	errs := j.summary(t)
	report(t, checkExclusion(j))
	report(t, checkLostHolds(j))
	report(t, checkTokens(j))
	if errs > 0 {
		t.Logf("%d calls failed: hold counts are unknown, only safety is checked", errs)
		return
	}
	report(t, checkCounts(j))
	wantFree(t, c, "storm")
}

// faultStorm is a storm whose fault hits node 2 from a third to two thirds of the storm.
func faultStorm(t *testing.T, name string, down, up func(c *cluster)) {
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		c := newCluster(t)
		const dur, ttl = 4500 * time.Millisecond, 2 * time.Second
		j := runStorm(t, c, "storm", stormConfig{
			owners: 8, backends: 3, ttl: ttl, dur: dur, depth: 3,
			cfg: Config{NodeTimeout: 100 * time.Millisecond},
			fault: func(ctx context.Context, j *journal) {
				time.Sleep(dur / 3)
				j.note("down")
				down(c)
				time.Sleep(dur / 3)
				up(c)
				j.note("up")
			},
		})
		j.summary(t)
		report(t, checkExclusion(j))
		report(t, checkLostHolds(j))
		report(t, checkTokens(j))
		// Failed calls may leave holds behind; they must all end with their ttl.
		c.holds("storm")
		time.Sleep(ttl + 200*time.Millisecond)
		if left := c.leftovers(); len(left) > 0 {
			t.Errorf("lock state outlives every ttl: %v", left)
		}
	})
}

// TestAttackStormMinorityFault: the same storm while node 2 is cut off or stalled (its
// traffic held, then delivered late) for a third of the storm, then restored.
func TestAttackStormMinorityFault(t *testing.T) {
	t.Parallel()
	faultStorm(t, "cut", func(c *cluster) { c.proxies[2].Cut() }, func(c *cluster) { c.proxies[2].Restore() })
	faultStorm(t, "stall", func(c *cluster) { c.proxies[2].Stall() }, func(c *cluster) { c.proxies[2].Resume() })
	faultStorm(t, "cut node 0", func(c *cluster) { c.proxies[0].Cut() }, func(c *cluster) { c.proxies[0].Restore() })
}

// TestAttackStormOverBaseHold is the reproduction made hostile: the owner takes a
// base hold and keeps it through the storm while 8 goroutines over 3 instances re-enter and
// release and the rival tries all the while; with no fault, with node 2 cut off for a third
// of the storm, and with node 2 stalled (its traffic delivered late). The rival must never
// get in; with no fault, the base release must find exactly one hold and leave nothing.
func TestAttackStormOverBaseHold(t *testing.T) {
	t.Parallel()
	const dur = 4 * time.Second
	for _, tt := range []struct {
		name     string
		down, up func(c *cluster)
	}{
		{"no fault", nil, nil},
		{"node 2 cut", func(c *cluster) { c.proxies[2].Cut() }, func(c *cluster) { c.proxies[2].Restore() }},
		{"node 2 stalled", func(c *cluster) { c.proxies[2].Stall() }, func(c *cluster) { c.proxies[2].Resume() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			sc := stormConfig{
				owners: 8, backends: 3, ttl: 30 * time.Second, dur: dur, depth: 2, base: true,
				cfg: Config{NodeTimeout: 300 * time.Millisecond},
			}
			if tt.down != nil {
				sc.fault = func(ctx context.Context, j *journal) {
					time.Sleep(dur / 3)
					j.note("down")
					tt.down(c)
					time.Sleep(dur / 3)
					tt.up(c)
					j.note("up")
				}
			}
			j := runStorm(t, c, "storm", sc)
			errs := j.summary(t)
			report(t, checkExclusion(j))
			report(t, checkLostHolds(j))
			report(t, checkTokens(j))
			if tt.down != nil || errs > 0 {
				if tt.down == nil {
					t.Logf("%d calls failed: hold counts are unknown, only safety is checked", errs)
				}
				return
			}
			report(t, checkCounts(j))
			wantFree(t, c, "storm")
		})
	}
}

// TestAttackStormExpiry: short leases, a tenth of the holds kept past their ttl (and then
// never released), so leases expire under the goroutines' feet and the rival takes over.
func TestAttackStormExpiry(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const ttl = 500 * time.Millisecond
	j := runStorm(t, c, "storm", stormConfig{
		owners: 8, backends: 3, ttl: ttl, dur: 4 * time.Second, depth: 3, longHold: 0.05,
		cfg: Config{NodeTimeout: time.Second},
	})
	j.summary(t)
	report(t, checkExclusion(j))
	report(t, checkLostHolds(j))
	report(t, checkTokens(j))
	c.holds("storm")
	time.Sleep(ttl + 200*time.Millisecond)
	if left := c.leftovers(); len(left) > 0 {
		t.Errorf("lock state outlives every ttl: %v", left)
	}
}

// TestAttackStormAtHoldLimit: the owner's lease starts MaxHoldCount-4 deep (seeded on every
// node, as earlier acquires would have left it) and never released below that; 8 goroutines
// re-enter and release around the limit. At no moment may the owner hold more than
// MaxHoldCount, and once every goroutine released, the lease must count MaxHoldCount-4 again.
func TestAttackStormAtHoldLimit(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const key = "deep"
	const base = int64(lock.MaxHoldCount) - 4
	c.seed(key, []hold{{owner, 3, base}, {owner, 3, base}, {owner, 3, base}}, []int64{3, 3, 3})
	// The seed expires in 10s: renew it for the storm.
	seedB := c.hooked(nil)
	if _, err := seedB.Renew(context.Background(), key, owner, time.Minute); err != nil {
		t.Fatalf("setup: Renew: %v", err)
	}
	var bs []*Backend
	for range 3 {
		bs = append(bs, c.openWith(Config{NodeTimeout: time.Second}))
	}
	var mu sync.Mutex
	type held struct{ from, to time.Time }
	var holds []held
	var limitErrs, otherErrs, badCounts int
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 8 {
		b := bs[g%3]
		wg.Go(func() {
			var mine []int
			r := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			for ctx.Err() == nil || len(mine) > 0 {
				if ctx.Err() == nil && (len(mine) == 0 || len(mine) < 2 && r.IntN(2) == 0) {
					att, err := b.TryAcquire(context.Background(), key, owner, time.Minute)
					end := time.Now()
					mu.Lock()
					switch {
					case err == nil && att.Acquired:
						holds = append(holds, held{from: end})
						mine = append(mine, len(holds)-1)
						if (int64(att.Lease.HoldCount) > int64(lock.MaxHoldCount) || int64(att.Lease.HoldCount) <= base) && badCounts < 3 {
							badCounts++
							t.Errorf("re-entry reported hold count %d, want within (%d, %d]", att.Lease.HoldCount, base, lock.MaxHoldCount)
						}
					case errors.Is(err, lock.ErrHoldLimit):
						limitErrs++
					case err != nil:
						otherErrs++
					}
					mu.Unlock()
					continue
				}
				i := mine[len(mine)-1]
				mine = mine[:len(mine)-1]
				mu.Lock()
				holds[i].to = time.Now()
				mu.Unlock()
				if _, _, err := b.Release(context.Background(), key, owner, 0); err != nil {
					mu.Lock()
					otherErrs++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d re-entries, %d refused at the limit, %d other errors", len(holds), limitErrs, otherErrs)
	// Most holds certain at one moment: a sweep over the certain windows.
	type ev struct {
		at time.Time
		d  int
	}
	var evs []ev
	for _, h := range holds {
		evs = append(evs, ev{h.from, 1}, ev{h.to, -1})
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // ends first: a window that ends as another starts does not overlap
	})
	most, now := 0, 0
	for _, e := range evs {
		now += e.d
		most = max(most, now)
	}
	if base+int64(most) > int64(lock.MaxHoldCount) {
		t.Errorf("the owner held %d holds at once (%d seeded + %d certain), past MaxHoldCount %d",
			base+int64(most), base, most, int64(lock.MaxHoldCount))
	}
	if otherErrs > 0 {
		t.Logf("%d calls failed: the final count is unknown", otherErrs)
		return
	}
	st, err := seedB.Inspect(context.Background(), key)
	if err != nil || !st.Held || int64(st.HoldCount) != base {
		t.Errorf("after every re-entry was released: Inspect = %+v, %v; want the seeded %d holds (nodes: %v)", st, err, base, c.holds(key))
	}
	for i, h := range c.holds(key) {
		if h.count != base {
			t.Errorf("node %d counts %d, want the seeded %d: it missed or gained holds with no fault (nodes: %v)", i, h.count, base, c.holds(key))
		}
	}
}
