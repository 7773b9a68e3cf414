package workerid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/idgen/workerid"
)

// TestRedisOnCluster leases worker ids on a three-master Redis Cluster, whose nodes refuse a
// script touching a key another node serves: the acquire script builds its keys from
// KEYS[1], so they must all share its slot, whatever braces the prefix holds.
func TestRedisOnCluster(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartRedisClusterOf(t, testenv.RedisClusterConfig{Masters: 3, Password: "pw"})
	ctx := context.Background()
	for _, prefix := range []string{"", "}{app{", "{x}", "a}"} {
		open := func() *workerid.Redis {
			rdb, err := redisconf.Open(ctx, redisconf.Config{URL: cluster.URL()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rdb.Close() })
			return workerid.NewRedis(rdb, prefix)
		}
		a, b := open(), open()
		la, err := a.Acquire(ctx, "owner-a", time.Minute)
		if err != nil {
			t.Fatalf("prefix %q: Acquire: %v", prefix, err)
		}
		lb, err := b.Acquire(ctx, "owner-b", time.Minute)
		if err != nil || lb.ID == la.ID {
			t.Fatalf("prefix %q: second Acquire = %+v, %v; want another id than %d", prefix, lb, err, la.ID)
		}
		if err := b.Renew(ctx, la.ID, "owner-b", time.Minute, 1); !errors.Is(err, workerid.ErrLost) {
			t.Fatalf("prefix %q: Renew by a stranger = %v, want ErrLost", prefix, err)
		}
		if err := a.Renew(ctx, la.ID, "owner-a", time.Minute, 1000); err != nil {
			t.Fatalf("prefix %q: Renew: %v", prefix, err)
		}
		if err := a.Release(ctx, la.ID, "owner-a", 2000); err != nil {
			t.Fatalf("prefix %q: Release: %v", prefix, err)
		}
		again, err := b.Acquire(ctx, "owner-c", time.Minute)
		if err != nil || again.ID != la.ID || again.LastMillis != 2000 {
			t.Fatalf("prefix %q: Acquire after Release = %+v, %v; want id %d with last millisecond 2000", prefix, again, err, la.ID)
		}
		for _, l := range []workerid.Lease{again, lb} {
			if err := b.Release(ctx, l.ID, l.Owner, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
}
