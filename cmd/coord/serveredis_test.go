package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
)

// lockedBuffer is a bytes.Buffer the server's logger and the test may share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serveLogged runs `coord serve` with args at log level info, as serve does, and returns its
// URL and its log.
func serveLogged(t *testing.T, args ...string) (string, *lockedBuffer) {
	t.Helper()
	addr := freeAddr(t)
	log := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--addr", addr, "--data-dir", t.TempDir(), "--log-level", "info"}, args...), io.Discard, log)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("serve did not shut down")
		}
	})
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\n%s", err, log)
		default:
		}
		if res, err := http.Get("http://" + addr + "/metrics"); err == nil {
			res.Body.Close()
			return "http://" + addr, log
		}
	}
	t.Fatalf("coord serve did not start listening:\n%s", log)
	return "", nil
}

// TestServeRedisURL runs `coord serve --redis-url` on each Redis topology, with passwords,
// and drives the lock, task and ID services' Redis backends (and snowflake worker leases on
// Redis) through the CLI with keys whose braces move Redis's hash tag around.
func TestServeRedisURL(t *testing.T) {
	t.Parallel()
	const password = "serve-s3cret"
	tests := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"single with password", func(t *testing.T) string {
			return testenv.StartRedisWith(t, testenv.RedisConfig{Password: password}).URL()
		}},
		{"cluster of 3", func(t *testing.T) string {
			return testenv.StartRedisClusterOf(t, testenv.RedisClusterConfig{Masters: 3, Password: password}).URL()
		}},
		{"sentinel", func(t *testing.T) string {
			return testenv.StartRedisSentinel(t, testenv.RedisSentinelConfig{Password: password, Sentinels: 1}).URL()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url, log := serveLogged(t, "--redis-url", tt.url(t), "--id-worker-leases", "redis")
			run := func(args ...string) string {
				t.Helper()
				out, err := coord(t, append(args, "--server", url)...)
				if err != nil {
					t.Fatalf("coord %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			for _, key := range []string{"}", "{", "{}", "}{", "{a}b", "x{}y{z}"} {
				var acq struct {
					Acquired bool
					Lease    struct{ Owner, Backend string }
				}
				out := run("lock", "acquire", key, "--ttl", "1m", "--json")
				if err := json.Unmarshal([]byte(out), &acq); err != nil || !acq.Acquired || acq.Lease.Backend != "redis" {
					t.Fatalf("acquire %q = %s (%v), want acquired on redis", key, out, err)
				}
				if out := run("lock", "release", key, "--owner", acq.Lease.Owner); !strings.Contains(out, "0 holds left") {
					t.Fatalf("release %q printed %q", key, out)
				}
				ids := strings.Fields(run("id", "next", "--mode", "redis-incr", "--tag", key, "--count", "5"))
				if len(ids) != 5 || !increasing(ids) {
					t.Fatalf("redis-incr ids of tag %q = %v, want 5 increasing", key, ids)
				}
				pool := "p" + key
				run("task", "put", pool, key, "--payload", "x", "--backend", "redis")
				var picked struct {
					Tasks []struct{ ID, LeaseToken, LeaseSecret string }
				}
				if err := json.Unmarshal([]byte(run("task", "pick", pool, "--ttl", "1m", "--json", "--backend", "redis")), &picked); err != nil ||
					len(picked.Tasks) != 1 || picked.Tasks[0].ID != key {
					t.Fatalf("pick from pool %q: %v (%+v), want task %q", pool, err, picked, key)
				}
				run("task", "ack", pool, key, picked.Tasks[0].LeaseToken+":"+picked.Tasks[0].LeaseSecret, "--backend", "redis")
			}
			if strings.Contains(log.String(), password) {
				t.Fatalf("the log shows the Redis password:\n%s", log)
			}
			if !strings.Contains(log.String(), "xxxxx") {
				t.Fatalf("the log does not name the (redacted) Redis URL:\n%s", log)
			}
		})
	}
}

// TestServeRedisURLErrors: a wrong --redis-url or --redis-ca-file fails serve with an error
// naming the flag and never the password.
func TestServeRedisURLErrors(t *testing.T) {
	t.Parallel()
	const secret = "topsecret-pw"
	n := testenv.StartRedisWith(t, testenv.RedisConfig{Password: "the-right-one"})
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"url and addr", []string{"--redis-url", "redis://:" + secret + "@" + n.Addr(), "--redis-addr", n.Addr()}, "not both"},
		{"wrong password", []string{"--redis-url", "redis://:" + secret + "@" + n.Addr()}, "WRONGPASS"},
		{"no password", []string{"--redis-addr", n.Addr()}, "NOAUTH"},
		{"malformed", []string{"--redis-url", "redis://:" + secret + "@h1,h2"}, "redis+cluster"},
		{"ca file without tls", []string{"--redis-url", "redis://:" + secret + "@" + n.Addr(), "--redis-ca-file", "/etc/hostname"}, "TLS URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			log := &lockedBuffer{} // the event bus may still log after run returned
			err := run(ctx, append([]string{"serve", "--addr", freeAddr(t), "--data-dir", t.TempDir()}, c.args...), io.Discard, log)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--redis-url") {
				t.Fatalf("serve error = %v, want one naming --redis-url and containing %q", err, c.want)
			}
			if strings.Contains(err.Error()+log.String(), secret) {
				t.Fatalf("the error or log shows the password: %v\n%s", err, log.String())
			}
		})
	}
}
