package redlock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/services/lock"
)

// These tests force, with hooks, interleavings of one owner's concurrent calls that a storm
// reaches only now and then, and check the safety property every outcome must keep: while a
// call of the owner reported a hold that nobody released, another owner cannot acquire.

// leaseOf says whether holder is the holder id of a lease of owner that a majority of nodes
// keep: holder ids name leases (by their att), not owners.
func leaseOf(nodes []map[string]string, owner, holder string) bool {
	atts := map[string]int{}
	for _, h := range nodes {
		if h["owner"] == owner {
			atts[h["att"]]++
		}
	}
	for att, n := range atts {
		if n >= len(nodes)/2+1 && holderID(att) == holder {
			return true
		}
	}
	return false
}

// wantExclusive fails the test when owner "rival" can acquire key, or when the majority view
// does not show owner me, while me has a hold outstanding (why says whose).
func wantExclusive(t *testing.T, c *cluster, key, me, why string) {
	t.Helper()
	b := c.hooked(nil)
	st, err := b.Inspect(context.Background(), key)
	if err != nil || !st.Held || !leaseOf(c.rawHashes(key), me, st.HolderID) {
		t.Errorf("%s: Inspect = %+v, %v; want held by %q (nodes: %v)", why, st, err, me, c.rawHashes(key))
	}
	att, err := b.TryAcquire(context.Background(), key, "rival", time.Minute)
	if err != nil || att.Acquired {
		t.Fatalf("%s: a rival's TryAcquire = %+v, %v; want busy: two owners hold the lock (nodes: %v)",
			why, att, err, c.rawHashes(key))
	}
}

// TestAttackExpiredTakeUndoDropsReentry: X takes a free lock; its token is confirmed on nodes
// 0 and 1 and, before X's stamp reaches node 2, the same owner's Y re-enters (a majority holds
// the confirmed lease) and is told it holds the lock for a minute. X's process then pauses
// past X's own ttl (a GC pause, a starved CPU), so X finds no validity left and undoes its
// take. That undo must not take Y's hold with it: Y's lease is the same lease.
func TestAttackExpiredTakeUndoDropsReentry(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const key, me = "k", "me"
	// Each node call may take xTTL/10: enough on a loaded 2-core host (300ms, 30ms per
	// call, timed out on nodes 1 and 2 in a CI run, before the interleaving could happen).
	const xTTL = 2 * time.Second
	y := c.hooked(nil)

	var yAtt lock.Attempt
	var yErr error
	var once sync.Once
	x := c.hooked(func(script string, node int, run func() *redis.Cmd) *redis.Cmd {
		if script == "stamp" && node == 2 {
			once.Do(func() {
				c.waitConfirmed(key, 0, 1)
				yAtt, yErr = y.TryAcquire(context.Background(), key, me, time.Minute)
				// From here, not from the test's start: X's own clock started later, by
				// however long a loaded host took to get it going.
				time.Sleep(xTTL + 20*time.Millisecond)
			})
		}
		return run()
	})
	xAtt, xErr := x.TryAcquire(context.Background(), key, me, xTTL)
	t.Logf("X = %+v, %v; Y = %+v, %v", xAtt, xErr, yAtt, yErr)
	if xErr == nil && xAtt.Acquired {
		t.Fatalf("X acquired although its rounds took longer than its ttl: %+v", xAtt)
	}
	if yErr != nil {
		t.Fatalf("no fault, yet Y = %v", yErr)
	}
	if !yAtt.Acquired {
		return // Y found X's acquire in flight and holds nothing: nothing can be lost
	}
	// Y holds a lease valid for about a minute; nothing released it.
	wantExclusive(t, c, key, me, "after X undid its expired take while Y's re-entry stands")
}

// looseJoinRace builds, with no fault anywhere, a lease whose loose node counts fewer holds
// than the owner has: X takes the free lock and, between X's stamps on nodes 0-1 and on
// node 2, Y re-enters; between Y's first round and Y's join of node 2, Z re-enters and joins
// node 2 with count 3; Y's join then writes its older count 2 over it. The owner holds 3
// (X, Y, Z), nodes 0 and 1 count 3, loose node 2 counts 2. It returns the holds the owner
// has (3, unless the backend answered Y or Z busy).
func looseJoinRace(t *testing.T, c *cluster, key, me string) int {
	t.Helper()
	z := c.hooked(nil)
	var zAtt, yAtt lock.Attempt
	var zErr, yErr error
	var zOnce, yOnce sync.Once
	y := c.hooked(func(script string, node int, run func() *redis.Cmd) *redis.Cmd {
		if script == "join" && node == 2 {
			zOnce.Do(func() { zAtt, zErr = z.TryAcquire(context.Background(), key, me, time.Minute) })
		}
		return run()
	})
	x := c.hooked(func(script string, node int, run func() *redis.Cmd) *redis.Cmd {
		if script == "stamp" && node == 2 {
			yOnce.Do(func() {
				c.waitConfirmed(key, 0, 1)
				yAtt, yErr = y.TryAcquire(context.Background(), key, me, time.Minute)
			})
		}
		return run()
	})
	xAtt, xErr := x.TryAcquire(context.Background(), key, me, time.Minute)
	holds := countHolds(t, []string{"X", "Y", "Z"}, []lock.Attempt{xAtt, yAtt, zAtt}, []error{xErr, yErr, zErr})
	t.Logf("%d holds: X count %d, Y count %d, Z count %d; nodes %v",
		holds, xAtt.Lease.HoldCount, yAtt.Lease.HoldCount, zAtt.Lease.HoldCount, c.rawHashes(key))
	return holds
}

// countHolds returns how many of the attempts acquired; the first must have (it takes a free
// lock), and none may fail, as no fault is injected. An attempt that found the lock busy with
// the owner's own acquire in flight may be a legitimate answer; it just holds nothing.
func countHolds(t *testing.T, names []string, atts []lock.Attempt, errs []error) int {
	t.Helper()
	n := 0
	for i := range names {
		if errs[i] != nil || i == 0 && !atts[i].Acquired {
			t.Fatalf("setup: %s = %+v, %v; want acquired", names[i], atts[i], errs[i])
		}
		if atts[i].Acquired {
			n++
		}
	}
	return n
}

// TestAttackLooseJoinRaceThenMinorityDown: after looseJoinRace the owner holds 3; node 0 then
// goes down, a minority, which the doc promises the majority outvotes. Releasing the holds
// one by one must report 2, 1, 0, and the lock must stay the owner's until the last.
func TestAttackLooseJoinRaceThenMinorityDown(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const key, me = "k", "me"
	holds := looseJoinRace(t, c, key, me)
	b := c.open()
	c.down(0)
	for want := holds - 1; want >= 1; want-- {
		left, _, err := b.Release(context.Background(), key, me, 0)
		if err != nil || int(left) != want {
			t.Errorf("Release with node 0 down = %d, %v; want %d holds left (nodes: %v)", left, err, want, c.rawHashes(key))
		}
		wantExclusiveVia(t, c, b, key, me, "node 0 down, holds outstanding")
	}
}

// wantExclusiveVia is wantExclusive through backend b (which sees the cluster's cuts).
func wantExclusiveVia(t *testing.T, c *cluster, b *Backend, key, me, why string) {
	t.Helper()
	att, err := b.TryAcquire(context.Background(), key, "rival", time.Minute)
	if err != nil || att.Acquired {
		t.Fatalf("%s: a rival's TryAcquire = %+v, %v; want busy: two owners hold the lock (nodes: %v)",
			why, att, err, c.rawHashes(key))
	}
}

// looseJoin builds, with no fault anywhere, a lease with a loose node whose count is right:
// X takes the free lock and, between X's stamps on nodes 0-1 and on node 2, Y re-enters and
// joins node 2 with count 2. The owner holds 2 (X, Y) and every node counts 2. It returns
// the holds the owner has.
func looseJoin(t *testing.T, c *cluster, key, me string) int {
	t.Helper()
	var yAtt lock.Attempt
	var yErr error
	var once sync.Once
	y := c.hooked(nil)
	x := c.hooked(func(script string, node int, run func() *redis.Cmd) *redis.Cmd {
		if script == "stamp" && node == 2 {
			once.Do(func() {
				c.waitConfirmed(key, 0, 1)
				yAtt, yErr = y.TryAcquire(context.Background(), key, me, time.Minute)
			})
		}
		return run()
	})
	xAtt, xErr := x.TryAcquire(context.Background(), key, me, time.Minute)
	holds := countHolds(t, []string{"X", "Y"}, []lock.Attempt{xAtt, yAtt}, []error{xErr, yErr})
	t.Logf("%d holds: X count %d, Y count %d; nodes %v", holds, xAtt.Lease.HoldCount, yAtt.Lease.HoldCount, c.rawHashes(key))
	return holds
}

// TestAttackLoosePurgedUnderConcurrentReentry: the owner holds one hold on a lease with a
// loose node 2 (built with no fault anywhere). No node fails. The holder releases (R) while
// another goroutine of the owner acquires (Z): R reaches nodes 0 and 2 first, Z node 1.
// Whichever order they are taken in, the owner holds one hold afterwards (Z's), so the lock
// must still be the owner's.
func TestAttackLoosePurgedUnderConcurrentReentry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		build func(t *testing.T, c *cluster, key, me string) int
	}{
		{"loose count right", looseJoin},
		{"loose count low after a join race", looseJoinRace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			const key, me = "k", "me"
			holds := tt.build(t, c, key, me)
			plain := c.hooked(nil)
			for want := holds - 1; want >= 1; want-- {
				if left, _, err := plain.Release(context.Background(), key, me, 0); err != nil || int(left) != want {
					t.Fatalf("setup: Release = %d, %v; want %d (nodes: %v)", left, err, want, c.rawHashes(key))
				}
			}
			g := newGate(t)
			// R's purge, if it comes to one, reaches each node after Z's first round there.
			r := c.hooked(ordered(g, "R", map[string][]string{
				"release/1": {step("Z", "acquire", 1)},
				"drop/0":    {step("Z", "acquire", 0)},
				"drop/1":    {step("Z", "acquire", 1)},
				"drop/2":    {step("Z", "acquire", 2)},
			}))
			z := c.hooked(ordered(g, "Z", map[string][]string{
				"acquire/0": {step("R", "release", 0)},
				"acquire/2": {step("R", "release", 2)},
			}))
			var wg sync.WaitGroup
			var left uint32
			var rErr error
			wg.Go(func() { left, _, rErr = r.Release(context.Background(), key, me, 0) })
			zAtt, zErr := z.TryAcquire(context.Background(), key, me, time.Minute)
			wg.Wait()
			t.Logf("R = %d, %v; Z = %+v, %v; nodes %v", left, rErr, zAtt, zErr, c.rawHashes(key))
			if rErr != nil || zErr != nil {
				t.Fatalf("no fault, yet R = %d, %v; Z = %+v, %v", left, rErr, zAtt, zErr)
			}
			if !zAtt.Acquired {
				// Busy with the owner's own calls in flight: Z tries again, as the service does.
				if zAtt, zErr = plain.TryAcquire(context.Background(), key, me, time.Minute); zErr != nil || !zAtt.Acquired {
					t.Fatalf("Z's retry = %+v, %v; want acquired", zAtt, zErr)
				}
			}
			wantExclusive(t, c, key, me, "Z's hold stands")
		})
	}
}

// TestAttackHoldLimitRace: the owner holds MaxHoldCount-1 on every node. Two re-entries G1
// and G2 race: G1 reaches nodes 0 and 2 first, G2 node 1. G1 wins on a majority, G2 sees the
// limit on a majority and gives its hold on node 1 back, so node 1 missed G1's hold. After
// one release, G3 and G4 race the same way (G3 first on nodes 0 and 1, G4 on node 2). The
// owner then holds MaxHoldCount-1, so at most one of them may re-enter; and the nodes must
// still count every hold the owner has.
func TestAttackHoldLimitRace(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const key, me = "deep", "me"
	const top = int64(lock.MaxHoldCount)
	c.seed(key, []hold{{me, 3, top - 1}, {me, 3, top - 1}, {me, 3, top - 1}}, []int64{3, 3, 3})

	race := func(a, b string, aFirst, bFirst []int) (lock.Attempt, error, lock.Attempt, error) {
		g := newGate(t)
		aAfter, bAfter := map[string][]string{}, map[string][]string{}
		for _, n := range bFirst {
			aAfter["acquire/"+strconv.Itoa(n)] = []string{step(b, "acquire", n)}
		}
		for _, n := range aFirst {
			bAfter["acquire/"+strconv.Itoa(n)] = []string{step(a, "acquire", 0), step(a, "acquire", 1), step(a, "acquire", 2)}
		}
		ba := c.hooked(ordered(g, a, aAfter))
		bb := c.hooked(ordered(g, b, bAfter))
		var wg sync.WaitGroup
		var attA, attB lock.Attempt
		var errA, errB error
		wg.Go(func() { attA, errA = ba.TryAcquire(context.Background(), key, me, time.Minute) })
		wg.Go(func() { attB, errB = bb.TryAcquire(context.Background(), key, me, time.Minute) })
		wg.Wait()
		return attA, errA, attB, errB
	}
	// holds is what the owner holds: the seed, plus each re-entry that succeeded, minus releases.
	holds := top - 1
	count := func(name string, att lock.Attempt, err error) {
		t.Helper()
		switch {
		case err == nil && att.Acquired:
			holds++
		case err != nil && !errors.Is(err, lock.ErrHoldLimit):
			t.Fatalf("no fault, yet %s = %v", name, err)
		}
	}
	g1, e1, g2, e2 := race("G1", "G2", []int{0, 2}, []int{1})
	t.Logf("G1 = %+v, %v; G2 = %+v, %v; nodes %v", g1, e1, g2, e2, c.holds(key))
	count("G1", g1, e1)
	count("G2", g2, e2)
	if holds > top {
		t.Fatalf("both re-entries from MaxHoldCount-1 succeeded: %d holds, past the limit", holds)
	}
	plain := c.hooked(nil)
	if left, _, err := plain.Release(context.Background(), key, me, 0); err != nil || int64(left) != holds-1 {
		t.Fatalf("Release = %d, %v; want %d left", left, err, holds-1)
	}
	holds--
	g3, e3, g4, e4 := race("G3", "G4", []int{0, 1}, []int{2})
	t.Logf("G3 = %+v, %v; G4 = %+v, %v; nodes %v", g3, e3, g4, e4, c.holds(key))
	count("G3", g3, e3)
	count("G4", g4, e4)
	if holds > top {
		t.Errorf("both re-entries from MaxHoldCount-1 succeeded: the owner holds %d holds, past MaxHoldCount", holds)
	}
	if st, err := plain.Inspect(context.Background(), key); err != nil || int64(st.HoldCount) != holds {
		t.Errorf("the owner holds %d, Inspect = %+v, %v; the nodes count %v, so the lock is freed with holds outstanding",
			holds, st, err, c.holds(key))
	}
}

// TestAttackFailedReentryEndsBaseLease: the owner holds the lock for a minute. A re-entry by
// the same owner with a short ttl (the edge's minimum, 100ms) re-enters every node, and the
// process then pauses past that ttl, so the re-entry finds no validity left and fails with
// ErrUnavailable, promising to undo what it did. The base hold was not released and was
// reported valid for a minute: the lock must stay the owner's.
func TestAttackFailedReentryEndsBaseLease(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const key, me = "k", "me"
	base, err := c.hooked(nil).TryAcquire(context.Background(), key, me, time.Minute)
	if err != nil || !base.Acquired {
		t.Fatalf("setup: base acquire = %+v, %v", base, err)
	}
	const shortTTL = 100 * time.Millisecond
	var once sync.Once
	re := c.hooked(func(script string, node int, run func() *redis.Cmd) *redis.Cmd {
		cmd := run()
		if script == "acquire" && node == 2 {
			once.Do(func() { time.Sleep(shortTTL + 50*time.Millisecond) })
		}
		return cmd
	})
	att, err := re.TryAcquire(context.Background(), key, me, shortTTL)
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("setup: re-entry past its ttl = %+v, %v; want ErrUnavailable", att, err)
	}
	wantExclusive(t, c, key, me, "base hold of a minute stands after a failed re-entry")
}

// TestAttackConcurrentReleasesLeaveLooseNode: no fault anywhere. The owner holds 1; the holder
// releases (R1) while another goroutine acquires (Z1): R1 reaches node 2 first and frees it
// there, so Z1 takes node 2, re-enters nodes 0 and 1 before R1 gets there, and joins node 2
// with the count it saw (2), which already leaves out R1's release: node 2 counts one hold
// too many. One more re-entry makes 2 holds; the two holders then release at once, R_a first
// on node 0, R_b first on node 1. Afterwards no hold is left, so one of the two releases must
// report 0, and nothing may be left on the nodes.
func TestAttackConcurrentReleasesLeaveLooseNode(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const key, me = "k", "me"
	plain := c.hooked(nil)
	if att, err := plain.TryAcquire(context.Background(), key, me, time.Minute); err != nil || !att.Acquired {
		t.Fatalf("setup: acquire = %+v, %v", att, err)
	}
	left1, zAtt := releaseMeetsAcquire(t, c, key, me, 2)
	if att, err := plain.TryAcquire(context.Background(), key, me, time.Minute); err != nil || !att.Acquired {
		t.Fatalf("setup: re-entry = %+v, %v", att, err)
	}
	t.Logf("R1 left %d, Z1 count %d; two holds now; nodes %v", left1, zAtt.Lease.HoldCount, c.rawHashes(key))

	var wg sync.WaitGroup
	g := newGate(t)
	ra := c.hooked(ordered(g, "Ra", map[string][]string{"release/1": {step("Rb", "release", 1)}}))
	rb := c.hooked(ordered(g, "Rb", map[string][]string{"release/0": {step("Ra", "release", 0)}}))
	var la, lb uint32
	var ea, eb error
	wg.Go(func() { la, _, ea = ra.Release(context.Background(), key, me, zAtt.Lease.FencingToken) })
	wg.Go(func() { lb, _, eb = rb.Release(context.Background(), key, me, zAtt.Lease.FencingToken) })
	wg.Wait()
	t.Logf("Ra = %d, %v; Rb = %d, %v; nodes %v", la, ea, lb, eb, c.rawHashes(key))
	if ea != nil || eb != nil {
		t.Fatalf("releases of two outstanding holds failed: %v, %v", ea, eb)
	}
	if la != 0 && lb != 0 {
		t.Errorf("both releases of the last two holds report %d and %d holds left; the later one must report 0", la, lb)
	}
	if left := c.leftovers(); len(left) > 0 {
		t.Errorf("every hold released, no fault: lock state left until its ttl: %v", left)
	}
}

// releaseMeetsAcquire runs, on the owner's lease, a release R and an acquire Z at once: R
// reaches node freed first, where it drops the last hold so that Z takes that node anew; Z
// reaches the two other nodes first, re-entering them before R's release lands there. Both
// succeed (Z retries when it found the lock busy with R in flight), so the owner's holds
// are as many as before.
func releaseMeetsAcquire(t *testing.T, c *cluster, key, me string, freed int) (uint32, lock.Attempt) {
	t.Helper()
	g := newGate(t)
	rAfter := map[string][]string{}
	for n := range 3 {
		if n != freed {
			rAfter["release/"+strconv.Itoa(n)] = []string{step("Z", "acquire", n)}
		}
	}
	r := c.hooked(ordered(g, "R", rAfter))
	z := c.hooked(ordered(g, "Z", map[string][]string{"acquire/" + strconv.Itoa(freed): {step("R", "release", freed)}}))
	// R names the lease it releases, as the SDK does: without a token a release cannot tell
	// the owner's leases apart, and where Z's new lease is already stamped it would drop Z's hold.
	st, err := c.hooked(nil).Inspect(context.Background(), key)
	if err != nil || !st.Held {
		t.Fatalf("setup: Inspect = %+v, %v; want the owner's lease", st, err)
	}
	var wg sync.WaitGroup
	var left uint32
	var rErr error
	wg.Go(func() { left, _, rErr = r.Release(context.Background(), key, me, st.FencingToken) })
	zAtt, zErr := z.TryAcquire(context.Background(), key, me, time.Minute)
	wg.Wait()
	if rErr != nil || zErr != nil {
		t.Fatalf("no fault, yet R = %d, %v; Z = %+v, %v", left, rErr, zAtt, zErr)
	}
	if !zAtt.Acquired {
		// Busy with the owner's own calls in flight: Z tries again, as the service does.
		if zAtt, zErr = c.hooked(nil).TryAcquire(context.Background(), key, me, time.Minute); zErr != nil || !zAtt.Acquired {
			t.Fatalf("Z's retry = %+v, %v; want acquired", zAtt, zErr)
		}
	}
	t.Logf("R left %d, Z count %d; nodes %v", left, zAtt.Lease.HoldCount, c.rawHashes(key))
	return left, zAtt
}

// TestAttackLooseMajorityOutlivesLastRelease: no fault anywhere. The owner holds 1; twice a
// release meets an acquire of the owner (see releaseMeetsAcquire), first freeing node 2, then
// node 1, so that both join the lease as loose nodes, each counting one hold too many. The
// owner still holds exactly 1 hold. Every release names its lease's token, as the SDK's do.
// Its release is the last: the lock must be free after it,
// for a rival to take, and nothing may be left on the nodes.
func TestAttackLooseMajorityOutlivesLastRelease(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const key, me = "k", "me"
	plain := c.hooked(nil)
	if att, err := plain.TryAcquire(context.Background(), key, me, time.Minute); err != nil || !att.Acquired {
		t.Fatalf("setup: acquire = %+v, %v", att, err)
	}
	releaseMeetsAcquire(t, c, key, me, 2)
	_, z := releaseMeetsAcquire(t, c, key, me, 1)
	left, _, err := plain.Release(context.Background(), key, me, z.Lease.FencingToken)
	t.Logf("last release = %d, %v; nodes %v", left, err, c.rawHashes(key))
	if err != nil || left != 0 {
		t.Errorf("the last release = %d, %v; want 0 holds left", left, err)
	}
	if st, err := plain.Inspect(context.Background(), key); err != nil || st.Held {
		t.Errorf("after every hold was released, Inspect = %+v, %v; want free", st, err)
	}
	if att, err := plain.TryAcquire(context.Background(), key, "rival", time.Minute); err != nil || !att.Acquired {
		t.Errorf("after every hold was released, a rival's TryAcquire = %+v, %v; want acquired", att, err)
	}
}
