package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock/redislock"
)

// TestRedisLeaseLoss takes a held lease away from under the SDK, in the two ways it happens
// in production, and checks the watchdog reports it within one renewal interval.
func TestRedisLeaseLoss(t *testing.T) {
	t.Parallel()
	const ttl = 600 * time.Millisecond
	tests := []struct {
		name string
		// break takes the lease away; rdb is the test's own Redis connection, proxy sits
		// between the service and Redis.
		breakLease func(t *testing.T, rdb *redis.Client, proxy *testenv.Proxy, lockKey string)
		wantCode   connect.Code
	}{
		{
			name: "key deleted behind its back",
			breakLease: func(t *testing.T, rdb *redis.Client, _ *testenv.Proxy, lockKey string) {
				if err := rdb.Del(context.Background(), lockKey).Err(); err != nil {
					t.Fatal(err)
				}
			},
			wantCode: connect.CodeFailedPrecondition,
		},
		{
			name: "connection to Redis cut",
			breakLease: func(t *testing.T, _ *redis.Client, proxy *testenv.Proxy, _ string) {
				proxy.Cut()
			},
			wantCode: connect.CodeUnavailable,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rdb := testenv.Redis(t, "")
			prefix := testenv.Prefix(t)
			testenv.CleanRedis(t, rdb, prefix)
			proxy := testenv.NewProxy(t, testenv.RedisAddr())
			inst := startInstance(t, "redis", redislock.New(testenv.Redis(t, proxy.Addr()), redislock.Config{Prefix: prefix}))

			l := must(inst.client.Lock(context.Background(), "victim", client.WithTTL(ttl)))(t)
			tt.breakLease(t, rdb, proxy, prefix+":{victim}")
			// Gone (failed_precondition) ends the lease at the first renewal; an unreachable
			// backend (unavailable) is retried until the lease's expiry minus the safety
			// margin, which must still come before the expiry itself.
			bound := ttl/3 + 300*time.Millisecond
			if tt.wantCode == connect.CodeUnavailable {
				bound = time.Until(l.ExpiresAt()) + 300*time.Millisecond
			}
			within(t, l.Lost(), bound, "Lost after the lease was taken away")
			if !errors.Is(l.Err(), client.ErrLeaseLost) || connect.CodeOf(l.Err()) != tt.wantCode {
				t.Fatalf("Err = %v, want ErrLeaseLost with code %v", l.Err(), tt.wantCode)
			}
			select {
			case <-l.Context().Done():
			default:
				t.Fatal("Context not canceled after the loss")
			}
		})
	}
}
