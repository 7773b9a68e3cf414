package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartRedisCluster starts a one-node Redis Cluster on a free loopback port: a redis-server
// in cluster mode that serves all 16384 slots. It enforces what a real cluster does to a
// command or script whose keys are in different slots (CROSSSLOT), so it proves a key layout
// cluster-safe without a six-node setup. It returns a cluster client, closed when the test
// ends, with retries off as the lock backends need.
func StartRedisCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	p := startRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	node := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer node.Close()
	if err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatalf("testenv: assign the cluster's slots: %v", err)
	}
	for {
		info, err := node.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: one-node cluster on %s never reported cluster_state:ok: %v %q", p.Addr(), err, info)
		case <-time.After(20 * time.Millisecond):
		}
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{p.Addr()}, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}
