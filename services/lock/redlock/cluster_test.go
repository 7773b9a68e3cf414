package redlock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock/redislock"
)

// cluster is a test's view of the shared Redlock dev nodes: every node behind its own proxy,
// which the test cuts to take the node down for the backend, and a direct client per node to
// seed and read what the backend cannot be asked for.
type cluster struct {
	t       *testing.T
	prefix  string
	proxies []*testenv.Proxy
	direct  []*redis.Client
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t, prefix: testenv.Prefix(t)}
	for _, addr := range testenv.RedlockAddrs() {
		d := testenv.Redis(t, addr)
		testenv.CleanRedis(t, d, c.prefix)
		c.direct = append(c.direct, d)
		c.proxies = append(c.proxies, testenv.NewProxy(t, addr))
	}
	return c
}

// open opens one more backend instance on the cluster's nodes, through their proxies.
func (c *cluster) open() *Backend {
	c.t.Helper()
	addrs := make([]string, len(c.proxies))
	for i, p := range c.proxies {
		addrs[i] = p.Addr()
	}
	b, err := Open(context.Background(), addrs, Config{Prefix: c.prefix, NodeTimeout: time.Second})
	if err != nil {
		c.t.Fatalf("Open: %v", err)
	}
	c.t.Cleanup(func() { b.Close() })
	return b
}

// down cuts the given nodes off from every backend of the cluster.
func (c *cluster) down(nodes ...int) {
	for _, i := range nodes {
		c.proxies[i].Cut()
	}
}

// hold is one node's lock hash; the zero hold means no hash.
type hold struct {
	owner        string
	fence, count int64
}

func (h hold) String() string {
	if h.owner == "" {
		return "free"
	}
	return h.owner + " fence " + strconv.FormatInt(h.fence, 10) + " count " + strconv.FormatInt(h.count, 10)
}

// seed writes holds and fencing counters of key onto the nodes directly, as earlier
// acquires (or failures) would have left them.
func (c *cluster) seed(key string, holds []hold, counters []int64) {
	c.t.Helper()
	ctx := context.Background()
	keys := redislock.NewLayout(c.prefix).Keys(key)
	for i, d := range c.direct {
		if i < len(holds) && holds[i].owner != "" {
			h := holds[i]
			// att is a lease's identity; leases seeded with one token are one lease.
			att := "seed-" + strconv.FormatInt(h.fence, 10)
			if err := d.HSet(ctx, keys[0], "owner", h.owner, "fence", h.fence, "count", h.count, "att", att).Err(); err != nil {
				c.t.Fatal(err)
			}
			d.PExpire(ctx, keys[0], 10*time.Second)
		}
		if i < len(counters) {
			if err := d.Set(ctx, keys[1], counters[i], 0).Err(); err != nil {
				c.t.Fatal(err)
			}
		}
	}
}

// holds reads key's lock hash on every node, failing the test when a held hash has no
// expiry, which would make the lock permanent.
func (c *cluster) holds(key string) []hold {
	c.t.Helper()
	ctx := context.Background()
	k := redislock.NewLayout(c.prefix).Keys(key)[0]
	out := make([]hold, len(c.direct))
	for i, d := range c.direct {
		m, err := d.HGetAll(ctx, k).Result()
		if err != nil {
			c.t.Fatal(err)
		}
		if len(m) == 0 {
			continue
		}
		fence, _ := strconv.ParseInt(m["fence"], 10, 64)
		count, _ := strconv.ParseInt(m["count"], 10, 64)
		out[i] = hold{owner: m["owner"], fence: fence, count: count}
		if ttl := d.PTTL(ctx, k).Val(); ttl <= 0 {
			c.t.Fatalf("node %d: %v has pttl %v, want a lease", i, out[i], ttl)
		}
	}
	return out
}

// counters reads key's fencing counter on every node.
func (c *cluster) counters(key string) []int64 {
	c.t.Helper()
	k := redislock.NewLayout(c.prefix).Keys(key)[1]
	out := make([]int64, len(c.direct))
	for i, d := range c.direct {
		n, err := d.Get(context.Background(), k).Int64()
		if err != nil && err != redis.Nil {
			c.t.Fatal(err)
		}
		out[i] = n
	}
	return out
}

// wantHolds fails unless key's hashes on the nodes are want.
func (c *cluster) wantHolds(key string, want []hold) {
	c.t.Helper()
	got := c.holds(key)
	for i := range want {
		if got[i] != want[i] {
			c.t.Fatalf("node %d holds %v, want %v (all nodes: %v)", i, got[i], want[i], got)
		}
	}
}

// seededHolder is the public holder id of the lease seed wrote with token: derived from its
// att, as Attempt.Holder and Inspect report it, never from its owner.
func seededHolder(token uint64) string { return holderID("seed-" + strconv.FormatUint(token, 10)) }
