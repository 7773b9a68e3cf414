package zklock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// TestHoldLimit: a re-entry at lock.MaxHoldCount fails with lock.ErrHoldLimit and leaves the
// lease exactly as it was (same node, version and data), through the instance holding the
// node and through another one (which would otherwise take the lease over); the count never
// wraps to 0.
func TestHoldLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := testRoot(t)
	tests := []struct {
		name string
		// other re-enters through a second instance.
		other bool
	}{
		{name: "same instance"},
		{name: "another instance", other: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := "limit-" + tt.name
			a := openTest(t, root)
			via := a
			if tt.other {
				via = openTest(t, root)
			}
			held := mustAcquire(t, a, key, "o", 0)
			// One hold short of the limit, written straight into the node.
			e := readLine(t, a, key)[0]
			d := e.data
			d.Holds = lock.MaxHoldCount - 1
			if _, err := a.conn.Set(e.path, d.encode(), e.stat.Version); err != nil {
				t.Fatal(err)
			}

			att, err := via.TryAcquire(ctx, key, "o", 30*time.Second)
			if err != nil || !att.Acquired || att.Lease.HoldCount != lock.MaxHoldCount || att.Lease.FencingToken != held.Lease.FencingToken {
				t.Fatalf("re-entry to the limit = (%+v, %v), want acquired with %d holds", att, err, uint32(lock.MaxHoldCount))
			}
			before := readLine(t, a, key)
			for _, b := range []*Backend{via, a} {
				att, err = b.TryAcquire(ctx, key, "o", time.Minute)
				if !errors.Is(err, lock.ErrHoldLimit) || att.Acquired {
					t.Fatalf("re-entry past the limit = (%+v, %v), want lock.ErrHoldLimit", att, err)
				}
			}
			after := readLine(t, a, key)
			if len(after) != 1 || after[0].path != before[0].path || after[0].stat.Version != before[0].stat.Version || after[0].data != before[0].data {
				t.Fatalf("lease after the refused re-entry = %v, want unchanged %v", describe(after), describe(before))
			}
			if left, err := via.Release(ctx, key, "o"); err != nil || left != lock.MaxHoldCount-1 {
				t.Fatalf("release = (%d, %v), want (%d, nil)", left, err, uint32(lock.MaxHoldCount-1))
			}
		})
	}
}
