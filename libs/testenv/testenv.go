// Package testenv connects tests to the real backends that deploy/dev/backends.sh starts. A
// backend that does not answer fails the test, never skips it: a green run must mean every
// backend was exercised.
package testenv

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisAddr is the Redis the tests use: $COORDKIT_TEST_REDIS_ADDR or 127.0.0.1:6379.
func RedisAddr() string {
	return env("COORDKIT_TEST_REDIS_ADDR", "127.0.0.1:6379")
}

// Redis returns a client of the test Redis at addr (RedisAddr when empty), closed when the
// test ends, with retries off as the lock backends need. It fails the test when Redis does
// not answer.
func Redis(t testing.TB, addr string) *redis.Client {
	t.Helper()
	if addr == "" {
		addr = RedisAddr()
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 128, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("testenv: Redis at %s does not answer (%v); start the dev backends with deploy/dev/backends.sh up", addr, err)
	}
	return rdb
}

// RedisHandshake reports whether cmd is part of the set-up go-redis sends on a connection it
// dials (HELLO, CLIENT SETINFO, AUTH, SELECT), for hooks that count a test's own commands.
func RedisHandshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

// Prefix returns a prefix unique to this test run, so tests sharing a backend never meet.
func Prefix(t testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return "test:" + name + ":" + rand.Text()[:8]
}

// CleanRedis deletes every key under prefix when the test ends.
func CleanRedis(t testing.TB, rdb *redis.Client, prefix string) {
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
}
