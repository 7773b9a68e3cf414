package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/redisslot"
)

// clusterReadyTimeout bounds how long a started cluster may take to agree on its slots.
const clusterReadyTimeout = 20 * time.Second

// StartRedisCluster starts a one-node Redis Cluster on a free loopback port: a redis-server
// in cluster mode that serves all 16384 slots. It enforces what a real cluster does to a
// command or script whose keys are in different slots (CROSSSLOT), so it proves a key layout
// cluster-safe without a multi-node setup. It returns a cluster client, closed when the test
// ends, with retries off as the lock backends need.
func StartRedisCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	return StartRedisClusterOf(t, RedisClusterConfig{Masters: 1}).Client(t)
}

// RedisClusterConfig configures a cluster started by StartRedisClusterOf.
type RedisClusterConfig struct {
	// Masters is the number of master nodes; the slots are split evenly between them.
	// Default 3.
	Masters int
	// Password is every node's requirepass.
	Password string
	// TLS, when set, makes every node accept only TLS connections (the cluster bus too).
	TLS *TLSCerts
}

// RedisCluster is a Redis Cluster of private redis-server processes on loopback ports, one
// master per slot range and no replicas. Unlike a one-node cluster it answers MOVED for a key
// asked of the wrong node, and refuses a script that touches a key another node serves.
type RedisCluster struct {
	// Nodes are the masters, in slot order: Nodes[0] serves the lowest slots.
	Nodes []*RedisProcess
	cfg   RedisClusterConfig
}

// StartRedisClusterOf starts a cluster and waits until every node reports cluster_state:ok
// and knows every other node. The processes are killed when the test ends.
func StartRedisClusterOf(t testing.TB, cfg RedisClusterConfig) *RedisCluster {
	t.Helper()
	if cfg.Masters <= 0 {
		cfg.Masters = 3
	}
	c := &RedisCluster{cfg: cfg}
	for range cfg.Masters {
		args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"}
		if cfg.TLS != nil {
			args = append(args, "--tls-cluster", "yes")
		}
		c.Nodes = append(c.Nodes, StartRedisWith(t, RedisConfig{Password: cfg.Password, TLS: cfg.TLS, Args: args}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	per := redisslot.Count / cfg.Masters
	for i, n := range c.Nodes {
		direct := n.Client(t)
		first, last := i*per, (i+1)*per-1
		if i == cfg.Masters-1 {
			last = redisslot.Count - 1
		}
		if err := direct.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err(); err != nil {
			t.Fatalf("testenv: assign slots %d-%d to %s: %v", first, last, n.Addr(), err)
		}
		if i > 0 {
			host, port := "127.0.0.1", c.Nodes[0].Port()
			if err := direct.ClusterMeet(ctx, host, fmt.Sprint(port)).Err(); err != nil {
				t.Fatalf("testenv: CLUSTER MEET from %s: %v", n.Addr(), err)
			}
		}
	}
	for _, n := range c.Nodes {
		c.waitAgreed(ctx, t, n)
	}
	return c
}

// waitAgreed waits until n reports cluster_state:ok and knows every node.
func (c *RedisCluster) waitAgreed(ctx context.Context, t testing.TB, n *RedisProcess) {
	t.Helper()
	direct := n.Client(t)
	for {
		info, err := direct.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") &&
			strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d\r", len(c.Nodes))) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: cluster node %s never agreed on %d nodes: %v %q", n.Addr(), len(c.Nodes), err, info)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Addrs are the nodes' host:port.
func (c *RedisCluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// URL is the cluster's redis+cluster:// URL, with its password.
func (c *RedisCluster) URL() string {
	first := c.Nodes[0].URL()
	scheme, rest, _ := strings.Cut(first, "://")
	return scheme + "+cluster://" + rest + strings.Join(append([]string{""}, c.Addrs()[1:]...), ",")
}

// Client returns a cluster client, closed when the test ends, with retries off as the lock
// backends need.
func (c *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	o := &redis.ClusterOptions{Addrs: c.Addrs(), Password: c.cfg.Password, MaxRetries: -1, MaxRedirects: -1}
	if c.cfg.TLS != nil {
		o.TLSConfig = c.cfg.TLS.ClientConfig()
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { cc.Close() })
	return cc
}
