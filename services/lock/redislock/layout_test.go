package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/redisslot"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
)

// hostileKeys are keys whose braces move Redis's hash tag around.
var hostileKeys = []string{
	"order:42", "", "}", "{", "{}", "}{", "}abc", "abc}", "{abc}", "a}b{c}", "}}}{{{", "{{}}",
	"x{y}z", "{user1000}.following", "ключ}", "🔒{🔑}", strings.Repeat("}", 512), strings.Repeat("{", 511) + "}",
}

// TestSlot checks that every key a script touches lands in the lock hash's slot, whatever
// the key contains (the slot math itself is tested in libs/redisslot).
func TestSlot(t *testing.T) {
	t.Parallel()
	l := NewLayout(DefaultPrefix)
	for _, key := range hostileKeys {
		k := append(append(l.Keys(key), l.LeaseKey(key)), l.QueueKeys(key)...)
		for _, other := range k[1:] {
			if Slot(k[0]) != Slot(other) {
				t.Errorf("key %q: lock hash %q in slot %d, %q in slot %d", key, k[0], Slot(k[0]), other, Slot(other))
			}
		}
	}
}

// TestClusterHostileKeys runs every operation on a real (one-node) Redis Cluster, which
// refuses a script whose keys are in different slots: the layout must keep each key's lock,
// fence counter, lease key and line together, braces or not.
func TestClusterHostileKeys(t *testing.T) {
	t.Parallel()
	b := New(testenv.StartRedisCluster(t), Config{})
	ctx := context.Background()
	for _, key := range hostileKeys {
		att, err := b.TryAcquire(ctx, key, "owner", time.Minute)
		if err != nil || !att.Acquired {
			t.Fatalf("TryAcquire(%q) = %+v, %v", key, att, err)
		}
		if _, err := b.Renew(ctx, key, "owner", 0); err != nil {
			t.Fatalf("Renew(%q): %v", key, err)
		}
		if st, err := b.Inspect(ctx, key); err != nil || !st.Held {
			t.Fatalf("Inspect(%q) = %+v, %v", key, st, err)
		}
		if att, err := b.TryAcquireFair(ctx, key, "rival", time.Minute, time.Minute); err != nil || att.Acquired {
			t.Fatalf("TryAcquireFair(%q) = %+v, %v", key, att, err)
		}
		if err := b.LeaveQueue(ctx, key, "rival"); err != nil {
			t.Fatalf("LeaveQueue(%q): %v", key, err)
		}
		if left, _, err := b.Release(ctx, key, "owner", 0); err != nil || left != 0 {
			t.Fatalf("Release(%q) = %d, %v", key, left, err)
		}
		if st, err := b.EndExpired(ctx, key); err != nil || st.Held {
			t.Fatalf("EndExpired(%q) = %+v, %v", key, st, err)
		}
	}
}

// TestStorageBoundedByLiveLocks: 100,000 distinct keys locked and released leave nothing but
// the slot counters behind, and a reused key's token still rises after its state was gone.
func TestStorageBoundedByLiveLocks(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t, "")
	prefix := testenv.Prefix(t)
	testenv.CleanRedis(t, rdb, prefix)
	b := New(rdb, Config{Prefix: prefix})
	ctx := context.Background()

	first, err := b.TryAcquire(ctx, "order:reused", "a", time.Minute)
	if err != nil || !first.Acquired {
		t.Fatalf("TryAcquire: %+v, %v", first, err)
	}
	if _, _, err := b.Release(ctx, "order:reused", "a", 0); err != nil {
		t.Fatal(err)
	}

	const keys, workers = 100_000, 32
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
	var left, counters int
	iter := rdb.Scan(ctx, 0, prefix+"*", 5000).Iterator()
	for iter.Next(ctx) {
		left++
		if strings.HasPrefix(iter.Val(), prefix+":fence-bucket:") {
			counters++
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if left != counters || counters > redisslot.Count {
		t.Fatalf("%d keys left after %d locks came and went: %d fence counters (at most %d), %d others; want only counters",
			left, keys, counters, redisslot.Count, left-counters)
	}

	again, err := b.TryAcquire(ctx, "order:reused", "b", time.Minute)
	if err != nil || !again.Acquired || again.Lease.FencingToken <= first.Lease.FencingToken {
		t.Fatalf("re-acquire of a reclaimed key = %+v, %v; want a token above %d", again, err, first.Lease.FencingToken)
	}
}

// TestHoldLimit: a re-entry at MaxHoldCount fails with ErrHoldLimit and changes nothing;
// one below it reaches it.
func TestHoldLimit(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t, "")
	prefix := testenv.Prefix(t)
	testenv.CleanRedis(t, rdb, prefix)
	b := New(rdb, Config{Prefix: prefix})
	ctx := context.Background()
	att, err := b.TryAcquire(ctx, "deep", "o", time.Minute)
	if err != nil || !att.Acquired {
		t.Fatalf("TryAcquire: %+v, %v", att, err)
	}
	hash := b.keys("deep")[0]
	rdb.HSet(ctx, hash, "count", lock.MaxHoldCount-1)
	att, err = b.TryAcquire(ctx, "deep", "o", time.Minute)
	if err != nil || att.Lease.HoldCount != lock.MaxHoldCount {
		t.Fatalf("re-entry at MaxHoldCount-1 = %+v, %v; want hold count %d", att, err, uint32(lock.MaxHoldCount))
	}
	_, err = b.TryAcquire(ctx, "deep", "o", 5*time.Second)
	if !errors.Is(err, lock.ErrHoldLimit) {
		t.Fatalf("re-entry at MaxHoldCount = %v, want ErrHoldLimit", err)
	}
	if n, _ := rdb.HGet(ctx, hash, "count").Int64(); n != lock.MaxHoldCount {
		t.Fatalf("hold count after the refused re-entry = %d, want %d", n, uint32(lock.MaxHoldCount))
	}
	if ttl, _ := rdb.HGet(ctx, hash, "ttl").Int64(); ttl != time.Minute.Milliseconds() {
		t.Fatalf("lease ttl after the refused re-entry = %dms, want it untouched", ttl)
	}
	left, _, err := b.Release(ctx, "deep", "o", 0)
	if err != nil || left != lock.MaxHoldCount-1 {
		t.Fatalf("Release = %d, %v; want %d", left, err, uint32(lock.MaxHoldCount-1))
	}
}

// TestBackendKeysFollowLayout pins the backend's one-hash key building to the Layout's.
func TestBackendKeysFollowLayout(t *testing.T) {
	b := New(nil, Config{Prefix: "pfx"})
	for _, key := range []string{"k", "order:42", "{braced}", "ключ", ""} {
		want := append(b.layout.Keys(key), b.layout.LeaseKey(key))
		if got := b.keys(key); !slices.Equal(got, want) {
			t.Errorf("keys(%q) = %q, want %q", key, got, want)
		}
		if got := b.ownKeys(key); !slices.Equal(got, []string{want[0], want[2]}) {
			t.Errorf("ownKeys(%q) = %q, want %q", key, got, []string{want[0], want[2]})
		}
	}
}
