package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// TestHoldLimit: a re-entry when a majority counts MaxHoldCount holds fails with
// ErrHoldLimit and leaves every node as it was; one below the limit reaches it.
func TestHoldLimit(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const max = int64(lock.MaxHoldCount)
	c.seed("deep", []hold{{"me", 3, max - 1}, {"me", 3, max - 1}, {"me", 3, max - 1}}, []int64{3, 3, 3})
	b := c.open()
	att, err := b.TryAcquire(context.Background(), "deep", "me", time.Minute)
	if err != nil || !att.Acquired || att.Lease.HoldCount != lock.MaxHoldCount {
		t.Fatalf("re-entry at MaxHoldCount-1 = %+v, %v; want hold count %d", att, err, max)
	}
	_, err = b.TryAcquire(context.Background(), "deep", "me", time.Minute)
	if !errors.Is(err, lock.ErrHoldLimit) {
		t.Fatalf("re-entry at MaxHoldCount = %v, want ErrHoldLimit", err)
	}
	c.wantHolds("deep", []hold{{"me", 3, max}, {"me", 3, max}, {"me", 3, max}})

	// One node below the limit re-enters, the majority refuses: that node gives it back.
	c.seed("mixed", []hold{{"me", 4, max}, {"me", 4, max - 1}, {"me", 4, max}}, []int64{4, 4, 4})
	if _, err := b.TryAcquire(context.Background(), "mixed", "me", time.Minute); !errors.Is(err, lock.ErrHoldLimit) {
		t.Fatalf("re-entry with a majority at MaxHoldCount = %v, want ErrHoldLimit", err)
	}
	c.wantHolds("mixed", []hold{{"me", 4, max}, {"me", 4, max - 1}, {"me", 4, max}})
}

// TestStorageBoundedByLiveLocks: distinct keys locked and released leave only the slot
// counters on every node, and a reused key's token still rises.
func TestStorageBoundedByLiveLocks(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	b := c.open()
	ctx := context.Background()
	first, err := b.TryAcquire(ctx, "reused", "a", time.Minute)
	if err != nil || !first.Acquired {
		t.Fatalf("TryAcquire: %+v, %v", first, err)
	}
	if _, _, err := b.Release(ctx, "reused", "a", 0); err != nil {
		t.Fatal(err)
	}
	const keys, workers = 5000, 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < keys; i += workers {
				key := fmt.Sprintf("order:%d", i)
				if att, err := b.TryAcquire(ctx, key, "o", time.Minute); err != nil || !att.Acquired {
					errs <- fmt.Errorf("TryAcquire(%s) = %+v, %v", key, att, err)
					return
				}
				if _, _, err := b.Release(ctx, key, "o", 0); err != nil {
					errs <- fmt.Errorf("Release(%s): %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, d := range c.direct {
		iter := d.Scan(ctx, 0, c.prefix+"*", 5000).Iterator()
		for iter.Next(ctx) {
			if !strings.HasPrefix(iter.Val(), c.prefix+":fence-bucket:") {
				t.Fatalf("node %d: %q left behind after every lock was released", i, iter.Val())
			}
		}
	}
	again, err := b.TryAcquire(ctx, "reused", "b", time.Minute)
	if err != nil || !again.Acquired || again.Lease.FencingToken <= first.Lease.FencingToken {
		t.Fatalf("re-acquire of a reclaimed key = %+v, %v; want a token above %d", again, err, first.Lease.FencingToken)
	}
}
