package redislock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/redisslot"
	"github.com/coordkit/coordkit/libs/testenv"
)

// clusterKeys are hostileKeys plus the keys only the Go API can pass (invalid UTF-8) and
// 512-byte keys, the service's limit, with their braces at either end.
var clusterKeys = append(append([]string{}, hostileKeys...),
	"\xff", "{\xff}", "\xfe{\xff}\xfd", "}\xc3{", "{}\xff{}",
	strings.Repeat("k", 512), "{"+strings.Repeat("k", 510)+"}", "}"+strings.Repeat("{", 511),
	strings.Repeat("{}", 256), "{a}"+strings.Repeat("b", 509),
)

// TestClusterOfThreeHostileKeys runs every operation of two backends, each on its own client
// of a three-master cluster, on keys whose braces move the hash tag: the lock hash, fence
// counter, lease key and line of a key must share a slot (no CROSSSLOT), on whichever node
// serves it, and a key's next holder must get a higher fencing token.
func TestClusterOfThreeHostileKeys(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartRedisClusterOf(t, testenv.RedisClusterConfig{Masters: 3, Password: "pw"})
	open := func() *Backend {
		rdb, err := redisconf.Open(context.Background(), redisconf.Config{URL: cluster.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rdb.Close() })
		return New(rdb, Config{})
	}
	a, b := open(), open()
	ctx := context.Background()
	nodes := map[int]bool{}
	for _, key := range clusterKeys {
		nodes[Slot(a.keys(key)[0])*len(cluster.Nodes)/redisslot.Count] = true
		first, err := a.TryAcquire(ctx, key, "owner-a", time.Minute)
		if err != nil || !first.Acquired {
			t.Fatalf("TryAcquire(%q) = %+v, %v", key, first, err)
		}
		if again, err := a.TryAcquire(ctx, key, "owner-a", time.Minute); err != nil || again.Lease.HoldCount != 2 {
			t.Fatalf("re-entry of %q = %+v, %v; want hold count 2", key, again, err)
		}
		if att, err := b.TryAcquire(ctx, key, "owner-b", time.Minute); err != nil || att.Acquired {
			t.Fatalf("rival TryAcquire(%q) = %+v, %v; want refused", key, att, err)
		}
		if _, err := b.Renew(ctx, key, "owner-a", time.Minute); err != nil {
			t.Fatalf("Renew(%q) from the other instance: %v", key, err)
		}
		if st, err := b.Inspect(ctx, key); err != nil || !st.Held || st.HoldCount != 2 {
			t.Fatalf("Inspect(%q) = %+v, %v", key, st, err)
		}
		if att, err := b.TryAcquireFair(ctx, key, "owner-b", time.Minute, time.Minute); err != nil || att.Acquired || att.Place != 1 {
			t.Fatalf("TryAcquireFair(%q) = %+v, %v; want first in line", key, att, err)
		}
		for left := uint32(2); left > 0; left-- {
			if n, _, err := a.Release(ctx, key, "owner-a", 0); err != nil || n != left-1 {
				t.Fatalf("Release(%q) = %d, %v; want %d left", key, n, err, left-1)
			}
		}
		next, err := b.TryAcquireFair(ctx, key, "owner-b", time.Minute, time.Minute)
		if err != nil || !next.Acquired || next.Lease.FencingToken <= first.Lease.FencingToken {
			t.Fatalf("next holder of %q = %+v, %v; want a token above %d", key, next, err, first.Lease.FencingToken)
		}
		if _, _, err := b.Release(ctx, key, "owner-b", 0); err != nil {
			t.Fatalf("Release(%q): %v", key, err)
		}
		// A lease that runs out unreleased is reported by EndExpired.
		if att, err := a.TryAcquire(ctx, key, "owner-a", 50*time.Millisecond); err != nil || !att.Acquired {
			t.Fatalf("short TryAcquire(%q) = %+v, %v", key, att, err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	for _, key := range clusterKeys {
		if st, err := b.EndExpired(ctx, key); err != nil || st.Held {
			t.Fatalf("EndExpired(%q) = %+v, %v", key, st, err)
		}
	}
	if len(nodes) != len(cluster.Nodes) {
		t.Fatalf("the keys landed on %d of %d nodes: the test does not cover the cluster", len(nodes), len(cluster.Nodes))
	}
}

// TestSentinelFailover: through redis+sentinel:// the backend follows the master the
// sentinels promote. A lease replicated before the failover is still held by its owner after
// it, and the key's next holder gets a higher fencing token, since the counter replicated too.
// (A lease acquired and not yet replicated when the master dies is lost: Redis replication is
// asynchronous; that is what the redlock backend is for.)
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	set := testenv.StartRedisSentinel(t, testenv.RedisSentinelConfig{Password: "pw"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb, err := redisconf.Open(ctx, redisconf.Config{URL: set.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	b := New(rdb, Config{})
	const key = "}{failover"
	first, err := b.TryAcquire(ctx, key, "owner-a", time.Minute)
	if err != nil || !first.Acquired {
		t.Fatalf("TryAcquire = %+v, %v", first, err)
	}
	waitReplicated(ctx, t, rdb)

	set.Failover(t)
	var st struct {
		held bool
		err  error
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		s, err := b.Inspect(ctx, key)
		st.held, st.err = s.Held, err
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect after the failover: %v", err)
		}
	}
	if !st.held {
		t.Fatal("the replicated lease was lost in the failover")
	}
	if _, err := b.Renew(ctx, key, "owner-a", time.Minute); err != nil {
		t.Fatalf("Renew on the new master: %v", err)
	}
	if n, _, err := b.Release(ctx, key, "owner-a", 0); err != nil || n != 0 {
		t.Fatalf("Release on the new master = %d, %v", n, err)
	}
	next, err := b.TryAcquire(ctx, key, "owner-b", time.Minute)
	if err != nil || !next.Acquired || next.Lease.FencingToken <= first.Lease.FencingToken {
		t.Fatalf("next holder after the failover = %+v, %v; want a token above %d", next, err, first.Lease.FencingToken)
	}
}

// waitReplicated waits until the master's writes so far reached a replica.
func waitReplicated(ctx context.Context, t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	if n, err := rdb.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n < 1 {
		t.Fatalf("WAIT 1 = %d, %v; want the write on a replica", n, err)
	}
}
