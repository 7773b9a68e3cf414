package redisconf_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/testenv"
)

// roundTrip writes and reads keys spread over many slots through rdb, so that on a Cluster
// every node serves some of them.
func roundTrip(ctx context.Context, t *testing.T, c redisconf.Config) {
	t.Helper()
	rdb, err := redisconf.Open(ctx, c)
	if err != nil {
		t.Fatalf("Open(%s): %v", redisconf.Redact(c.URL), err)
	}
	defer rdb.Close()
	for i := range 50 {
		k := fmt.Sprintf("%s:%d", t.Name(), i)
		if err := rdb.Set(ctx, k, i, time.Minute).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		if n, err := rdb.Get(ctx, k).Int(); err != nil || n != i {
			t.Fatalf("GET %s = %d, %v; want %d", k, n, err, i)
		}
	}
}

// TestOpenPassword: the password of the URL reaches the server, whatever characters it
// holds; a wrong or missing one fails Open with an error that never shows it.
func TestOpenPassword(t *testing.T) {
	t.Parallel()
	const password = "p@ss:w/rd?#% é"
	n := testenv.StartRedisWith(t, testenv.RedisConfig{Password: password})
	ctx := context.Background()
	roundTrip(ctx, t, redisconf.Config{URL: n.URL()})
	for _, u := range []string{
		strings.Replace(n.URL(), "%40", "%41", 1), // one character off
		"redis://" + n.Addr(),
		"redis://default:" + "wrong" + "@" + n.Addr(),
	} {
		_, err := redisconf.Open(ctx, redisconf.Config{URL: u})
		if err == nil {
			t.Fatalf("Open(%s) succeeded", redisconf.Redact(u))
		}
		if strings.Contains(err.Error(), "w/rd") || strings.Contains(err.Error(), "wrong") {
			t.Fatalf("Open(%s) = %v: the error shows the password", redisconf.Redact(u), err)
		}
	}
	if strings.Contains(redisconf.Redact(n.URL()), "rd") {
		t.Fatalf("Redact(%q) = %q shows the password", n.URL(), redisconf.Redact(n.URL()))
	}
}

// TestOpenTLS: rediss:// with the CA file verifies the server; without it (system roots) the
// private CA is refused, as is plain redis:// on the TLS port.
func TestOpenTLS(t *testing.T) {
	t.Parallel()
	certs := testenv.NewTLSCerts(t)
	n := testenv.StartRedisWith(t, testenv.RedisConfig{TLS: certs, Password: "tls-secret"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	roundTrip(ctx, t, redisconf.Config{URL: n.URL(), CAFile: certs.CAFile})
	roundTrip(ctx, t, redisconf.Config{URL: "rediss://:tls-secret@localhost:" + strings.Split(n.Addr(), ":")[1], CAFile: certs.CAFile})
	roundTrip(ctx, t, redisconf.Config{URL: n.URL() + "?skip_verify=true"})
	if _, err := redisconf.Open(ctx, redisconf.Config{URL: n.URL()}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("rediss:// against a private CA with the system roots = %v, want a certificate error", err)
	}
	plain := strings.Replace(n.URL(), "rediss://", "redis://", 1) + "?dial_timeout=1s&read_timeout=1s"
	if _, err := redisconf.Open(ctx, redisconf.Config{URL: plain}); err == nil {
		t.Fatal("plain redis:// to a TLS-only port succeeded")
	}
}

// TestOpenCluster: redis+cluster:// naming one node finds the others, and keys of every
// node's slots work, with the nodes' password.
func TestOpenCluster(t *testing.T) {
	t.Parallel()
	c := testenv.StartRedisClusterOf(t, testenv.RedisClusterConfig{Masters: 3, Password: "cluster-pw"})
	ctx := context.Background()
	roundTrip(ctx, t, redisconf.Config{URL: c.URL()})
	first := strings.SplitN(c.URL(), ",", 2)[0]
	roundTrip(ctx, t, redisconf.Config{URL: first})
	o, err := redisconf.Parse(c.URL())
	if err != nil || o.Kind != redisconf.Cluster || len(o.Cluster.Addrs) != 3 {
		t.Fatalf("Parse(%s) = %+v, %v; want a cluster of 3 seeds", c.URL(), o, err)
	}
}

// TestOpenClusterTLS: rediss+cluster:// verifies every node against the CA file, by the
// address it dials (the cluster's slot map names the nodes by IP, the URL by "localhost").
func TestOpenClusterTLS(t *testing.T) {
	t.Parallel()
	certs := testenv.NewTLSCerts(t)
	c := testenv.StartRedisClusterOf(t, testenv.RedisClusterConfig{Masters: 3, Password: "pw", TLS: certs})
	ctx := context.Background()
	u := strings.Replace(c.URL(), "127.0.0.1", "localhost", 1)
	roundTrip(ctx, t, redisconf.Config{URL: u, CAFile: certs.CAFile})
	if _, err := redisconf.Open(ctx, redisconf.Config{URL: u}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("rediss+cluster:// against a private CA with the system roots = %v, want a certificate error", err)
	}
}

// TestOpenSentinel: redis+sentinel:// reaches the master the sentinels name, with the data
// nodes' password in the userinfo and the sentinels' own in the query, and follows it through
// a failover.
func TestOpenSentinel(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := testenv.StartRedisSentinel(t, testenv.RedisSentinelConfig{Password: "data-pw", SentinelPassword: "sentinel-pw"})
	t.Logf("master, replica and 3 sentinels ready in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb, err := redisconf.Open(ctx, redisconf.Config{URL: s.URL()})
	if err != nil {
		t.Fatalf("Open(%s): %v", redisconf.Redact(s.URL()), err)
	}
	defer rdb.Close()
	if err := rdb.Set(ctx, "before", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	now := s.Failover(t)
	t.Logf("SENTINEL FAILOVER done in %v", time.Since(start).Round(time.Millisecond))
	if now == s.Nodes[0].Addr() {
		t.Fatalf("failover kept the master at %s", now)
	}
	start = time.Now()
	eventually(t, 20*time.Second, func() error {
		if err := rdb.Set(ctx, "after", 2, 0).Err(); err != nil {
			return err
		}
		return nil
	})
	t.Logf("the client wrote to the new master %v after", time.Since(start).Round(time.Millisecond))
	if n, err := rdb.Get(ctx, "before").Int(); err != nil || n != 1 {
		t.Fatalf("after the failover GET before = %d, %v; want the replicated 1", n, err)
	}
	if err := rdb.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{
		strings.Replace(s.URL(), "sentinel-pw", "nope", 1),
		strings.Replace(s.URL(), "data-pw", "nope", 1),
		strings.Replace(s.URL(), "master=mymaster", "master=other", 1),
	} {
		short, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := redisconf.Open(short, redisconf.Config{URL: u})
		cancel()
		if err == nil {
			t.Errorf("Open(%s) succeeded", redisconf.Redact(u))
		} else if strings.Contains(err.Error(), "-pw") {
			t.Errorf("Open(%s) = %v: the error shows a password", redisconf.Redact(u), err)
		}
	}
}

// eventually retries f until it succeeds, failing the test with its last error after d.
func eventually(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %v: %v", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestOpenHonoursDeadlines: a call on a client Open built returns when its context's
// deadline passes, even when Redis has gone silent mid-call, not after go-redis's own read
// timeout (3s): a service's handlers, and its shutdown waiting for them, keep to their
// callers' deadlines.
func TestOpenHonoursDeadlines(t *testing.T) {
	t.Parallel()
	p := testenv.NewProxy(t, testenv.RedisAddr())
	rdb, err := redisconf.Open(context.Background(), redisconf.Config{URL: "redis://" + p.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	p.Stall()
	defer p.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = rdb.Get(ctx, t.Name()).Err()
	if took := time.Since(start); err == nil || took > 2*time.Second {
		t.Fatalf("GET on a silent Redis with a 300ms deadline: %v after %v, want a timeout at about 300ms", err, took)
	}
}
