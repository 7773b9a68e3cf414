package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sentinelReadyTimeout bounds how long a Sentinel set may take to see all its members, and
// a failover to complete.
const sentinelReadyTimeout = 30 * time.Second

// RedisSentinelConfig configures a Sentinel set started by StartRedisSentinel.
type RedisSentinelConfig struct {
	// MasterName is the name the sentinels monitor the master under; default "mymaster".
	MasterName string
	// Replicas is the number of replicas of the master; default 1.
	Replicas int
	// Sentinels is the number of sentinels; default 3. The quorum is a majority of them.
	Sentinels int
	// Password is the master's and the replicas' requirepass.
	Password string
	// SentinelPassword is the sentinels' own requirepass.
	SentinelPassword string
}

// RedisSentinelSet is a master, its replicas and the sentinels that watch them: private
// redis-server processes on loopback ports, killed when the test ends.
type RedisSentinelSet struct {
	// Nodes are the data nodes: Nodes[0] is the first master, the others its replicas.
	Nodes []*RedisProcess
	// Sentinels are the sentinel processes.
	Sentinels []*RedisProcess
	cfg       RedisSentinelConfig
}

// StartRedisSentinel starts a Sentinel set and waits until every replica is in sync and every
// sentinel knows every replica and every other sentinel, so that a failover can start at once.
func StartRedisSentinel(t testing.TB, cfg RedisSentinelConfig) *RedisSentinelSet {
	t.Helper()
	if cfg.MasterName == "" {
		cfg.MasterName = "mymaster"
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.Sentinels <= 0 {
		cfg.Sentinels = 3
	}
	s := &RedisSentinelSet{cfg: cfg}
	fast := []string{"--repl-diskless-sync-delay", "0"}
	master := StartRedisWith(t, RedisConfig{Password: cfg.Password, Args: fast})
	s.Nodes = append(s.Nodes, master)
	for range cfg.Replicas {
		s.Nodes = append(s.Nodes, StartRedisWith(t, RedisConfig{Password: cfg.Password, ReplicaOf: master.Addr(), Args: fast}))
	}
	for range cfg.Sentinels {
		s.Sentinels = append(s.Sentinels, s.startSentinel(t, master.Addr()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), sentinelReadyTimeout)
	defer cancel()
	for _, r := range s.Nodes[1:] {
		rc := r.Client(t)
		waitFor(ctx, t, "replica "+r.Addr()+" in sync", func() (bool, string) {
			info, err := rc.Info(ctx, "replication").Result()
			return err == nil && strings.Contains(info, "master_link_status:up"), info + fmt.Sprint(err)
		})
	}
	for _, sp := range s.Sentinels {
		sc := s.sentinelClient(t, sp)
		waitFor(ctx, t, "sentinel "+sp.Addr()+" sees the set", func() (bool, string) {
			replicas, err1 := sc.Replicas(ctx, cfg.MasterName).Result()
			others, err2 := sc.Sentinels(ctx, cfg.MasterName).Result()
			return err1 == nil && err2 == nil && len(replicas) == cfg.Replicas && len(others) == cfg.Sentinels-1,
				fmt.Sprintf("%d replicas %v, %d other sentinels %v", len(replicas), err1, len(others), err2)
		})
	}
	return s
}

// startSentinel starts one sentinel monitoring master. Sentinel rewrites its config file, so
// each gets its own.
func (s *RedisSentinelSet) startSentinel(t testing.TB, master string) *RedisProcess {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	host, port, _ := net.SplitHostPort(master)
	p := &RedisProcess{cfg: RedisConfig{Password: s.cfg.SentinelPassword}}
	p.Process = startServer(t, ProcessConfig{
		Name: "redis-server",
		Args: func(listen int) []string {
			lines := []string{
				"port " + strconv.Itoa(listen), "bind 127.0.0.1", "dir " + dir, `logfile ""`,
				fmt.Sprintf("sentinel monitor %s %s %s %d", s.cfg.MasterName, host, port, s.cfg.Sentinels/2+1),
				fmt.Sprintf("sentinel down-after-milliseconds %s 2000", s.cfg.MasterName),
				fmt.Sprintf("sentinel failover-timeout %s 10000", s.cfg.MasterName),
			}
			if s.cfg.Password != "" {
				lines = append(lines, fmt.Sprintf("sentinel auth-pass %s %s", s.cfg.MasterName, s.cfg.Password))
			}
			if s.cfg.SentinelPassword != "" {
				lines = append(lines, "requirepass "+s.cfg.SentinelPassword, "sentinel sentinel-pass "+s.cfg.SentinelPassword)
			}
			if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
				t.Errorf("testenv: write %s: %v", conf, err)
			}
			return []string{conf, "--sentinel"}
		},
		Ready:   func(port int) error { return ping(loopback(port)) },
		Timeout: redisReadyTimeout,
	}, "COORDKIT_TEST_REDIS_SERVER")
	return p
}

// MasterName is the name the sentinels know the master by.
func (s *RedisSentinelSet) MasterName() string { return s.cfg.MasterName }

// SentinelAddrs are the sentinels' host:port.
func (s *RedisSentinelSet) SentinelAddrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, p := range s.Sentinels {
		out[i] = p.Addr()
	}
	return out
}

// URL is the set's redis+sentinel:// URL, with the data nodes' and the sentinels' passwords.
func (s *RedisSentinelSet) URL() string {
	u := "redis+sentinel://"
	if s.cfg.Password != "" {
		u += url.UserPassword("", s.cfg.Password).String() + "@"
	}
	q := url.Values{"master": {s.cfg.MasterName}}
	if s.cfg.SentinelPassword != "" {
		q.Set("sentinel_password", s.cfg.SentinelPassword)
	}
	return u + strings.Join(s.SentinelAddrs(), ",") + "/0?" + q.Encode()
}

// sentinelClient is a client of one sentinel, closed when the test ends.
func (s *RedisSentinelSet) sentinelClient(t testing.TB, p *RedisProcess) *redis.SentinelClient {
	c := redis.NewSentinelClient(&redis.Options{Addr: p.Addr(), Password: s.cfg.SentinelPassword})
	t.Cleanup(func() { c.Close() })
	return c
}

// MasterAddr is the master's host:port as the first sentinel reports it.
func (s *RedisSentinelSet) MasterAddr(ctx context.Context, t testing.TB) string {
	t.Helper()
	addr, err := s.sentinelClient(t, s.Sentinels[0]).GetMasterAddrByName(ctx, s.cfg.MasterName).Result()
	if err != nil {
		t.Fatalf("testenv: SENTINEL GET-MASTER-ADDR-BY-NAME: %v", err)
	}
	return net.JoinHostPort(addr[0], addr[1])
}

// Failover makes a replica the master with SENTINEL FAILOVER and waits until every sentinel
// reports it, it says role:master, and the old master follows it; it returns the new
// master's host:port.
func (s *RedisSentinelSet) Failover(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelReadyTimeout)
	defer cancel()
	old := s.MasterAddr(ctx, t)
	if err := s.sentinelClient(t, s.Sentinels[0]).Failover(ctx, s.cfg.MasterName).Err(); err != nil {
		t.Fatalf("testenv: SENTINEL FAILOVER: %v", err)
	}
	var now string
	for _, sp := range s.Sentinels {
		sc := s.sentinelClient(t, sp)
		waitFor(ctx, t, "sentinel "+sp.Addr()+" reports a new master", func() (bool, string) {
			addr, err := sc.GetMasterAddrByName(ctx, s.cfg.MasterName).Result()
			if err != nil {
				return false, err.Error()
			}
			now = net.JoinHostPort(addr[0], addr[1])
			return now != old, now
		})
	}
	for _, n := range s.Nodes {
		nc := n.Client(t)
		switch n.Addr() {
		case now:
			waitFor(ctx, t, "new master "+now+" takes writes", func() (bool, string) {
				info, err := nc.Info(ctx, "replication").Result()
				return err == nil && strings.Contains(info, "role:master"), info + fmt.Sprint(err)
			})
		case old:
			waitFor(ctx, t, "old master "+old+" follows "+now, func() (bool, string) {
				info, err := nc.Info(ctx, "replication").Result()
				return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up"), info + fmt.Sprint(err)
			})
		}
	}
	return now
}

// waitFor polls ok until it reports true, failing the test with what it last said when ctx
// ends.
func waitFor(ctx context.Context, t testing.TB, what string, ok func() (bool, string)) {
	t.Helper()
	for {
		done, state := ok()
		if done {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: waiting for %s: %s", what, state)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
