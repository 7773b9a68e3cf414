package client

import (
	"context"
	"slices"
	"testing"
	"time"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
)

// TestIDBlocksDoNotGrowWhenUsedUpSlowly: the other half of TestIDBlocksGrowWhileUsedUpFast,
// which passes as well when blocks grow whatever their age: a block that lasted a second or
// more leaves the size as it is, and one that lasted a minute or more halves it, down to the
// smallest. The buffer's last fetch is aged by hand before each Next.
func TestIDBlocksDoNotGrowWhenUsedUpSlowly(t *testing.T) {
	t.Parallel()
	next := func(x *IDs, n int, age time.Duration) {
		t.Helper()
		b := x.buffer(idgenv1.Mode_MODE_SEGMENT, "slow")
		for range n {
			if age > 0 {
				b.mu.Lock()
				if !b.fetched.IsZero() {
					b.fetched = time.Now().Add(-age)
				}
				b.mu.Unlock()
			}
			if _, err := x.Next(context.Background(), idgenv1.Mode_MODE_SEGMENT, "slow"); err != nil {
				t.Fatal(err)
			}
		}
	}
	counts := func(svc *counter) []uint32 {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		return append([]uint32(nil), svc.counts...)
	}

	svc := &counter{}
	x := newIDs(svc, 10, 640)
	next(x, 200, 2*time.Second)
	// The first background fetch starts right after the first block arrives, so it counts as
	// fast (TestIDBlocksGrowWhileUsedUpFast wants 10, then 20); from then on the size stays.
	if c := counts(svc); len(c) < 4 || slices.ContainsFunc(c[2:], func(n uint32) bool { return n != c[1] }) {
		t.Fatalf("fetch counts %v for blocks that lasted 2s each: want the size to stay after the second", c)
	}

	svc = &counter{}
	x = newIDs(svc, 10, 640)
	next(x, 300, 0) // used up fast: grows
	grown := counts(svc)
	top := grown[len(grown)-1]
	next(x, 600, 2*time.Minute)
	all := counts(svc)
	if last := all[len(all)-1]; len(all) == len(grown) || last >= top {
		t.Fatalf("fetch counts %v: blocks that lasted 2min each did not halve the size from %d", all, top)
	}
}
