//go:build redlock_attack

package redlock

// Attacks on Redlock that still find holes, kept out of the default test run so CI stays
// meaningful: run them with
//
//	go test -tags redlock_attack -race -run Attack ./services/lock/redlock/
//
// Known open (see the closing note of the safety issue): a Release is not scoped to a lease,
// so a release of the owner's last hold that races a re-acquire by the same owner across the
// moment the lock frees can take a hold off the new lease on a node; and a lease that lives
// on exactly a majority loses exclusion to one more node's drift under faults.

import (
	"context"
	"testing"
	"time"
)

// TestAttackLooseMajorityOutlivesLastRelease: no fault anywhere. The owner holds 1; twice a
// release meets an acquire of the owner (see releaseMeetsAcquire), first freeing node 2, then
// node 1, so that both join the lease as loose nodes, each counting one hold too many. The
// owner still holds exactly 1 hold. Its release is the last: the lock must be free after it,
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
	releaseMeetsAcquire(t, c, key, me, 1)
	left, err := plain.Release(context.Background(), key, me)
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
