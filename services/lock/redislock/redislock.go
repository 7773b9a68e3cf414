// Package redislock is the lock backend on a single Redis (or Redis Cluster): one Lua script
// per operation, a server-side hold count for reentrancy, and fencing tokens from a per-slot
// counter raised with INCR inside the acquire script (see Layout), so a free key leaves no
// state behind.
package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/services/lock"
)

// DefaultPrefix starts every key the backend writes.
const DefaultPrefix = "coordkit:lock"

// Backend implements lock.Backend on Redis.
type Backend struct {
	rdb    redis.Scripter
	layout Layout
}

var _ lock.Backend = (*Backend)(nil)

// New returns a backend on rdb whose keys start with prefix (DefaultPrefix when empty; no
// braces, see NewLayout). The backend does not own rdb: whoever made the client closes it.
//
// Make rdb with retries off (redis.Options.MaxRetries = -1): the client cannot know whether a
// script whose reply was lost ran, and running the acquire script twice would count one
// re-entry as two holds. The service reports the failure as unavailable instead and the
// caller decides.
func New(rdb redis.Scripter, prefix string) *Backend {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Backend{rdb: rdb, layout: NewLayout(prefix)}
}

// keys returns the lock hash and fencing counter keys of key.
func (b *Backend) keys(key string) []string { return b.layout.Keys(key) }

// TryAcquire implements lock.Backend.
func (b *Backend) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Attempt, error) {
	start := time.Now()
	res, err := acquireScript.Run(ctx, b.rdb, b.keys(key), owner, ttl.Milliseconds(), lock.MaxHoldCount).Slice()
	if err != nil {
		return lock.Attempt{}, lock.Unavailable(ctx, "redis", err)
	}
	if len(res) != 5 {
		return lock.Attempt{}, fmt.Errorf("redislock: acquire script returned %d values", len(res))
	}
	return attempt(res, key, owner, start, ttl)
}

// attempt reads the first five values of an acquire script's reply {status, fence, count,
// ttl or the holder's pttl in ms, holder owner}; start is when the call began.
func attempt(res []any, key, owner string, start time.Time, ttl time.Duration) (lock.Attempt, error) {
	fence, count, ms := toInt(res[1]), toInt(res[2]), toInt(res[3])
	switch toInt(res[0]) {
	case -3:
		return lock.Attempt{}, fmt.Errorf("redislock: %w (%d)", lock.ErrHoldLimit, count)
	case 1:
		return lock.Attempt{Acquired: true, Lease: lock.Lease{
			Key: key, Owner: owner, FencingToken: uint64(fence),
			ExpiresAt: start.Add(ttl), HoldCount: uint32(count),
		}}, nil
	}
	holder, _ := res[4].(string)
	if holder == "" { // free, yet not the caller's turn (fair mode)
		return lock.Attempt{}, nil
	}
	return lock.Attempt{Holder: lock.State{
		Held: true, HolderID: lock.HolderID(holder), FencingToken: uint64(fence),
		ExpiresAt: time.Now().Add(time.Duration(ms) * time.Millisecond), HoldCount: uint32(count),
	}}, nil
}

// Release implements lock.Backend.
func (b *Backend) Release(ctx context.Context, key, owner string, token uint64) (uint32, uint64, error) {
	res, err := releaseScript.Run(ctx, b.rdb, b.keys(key)[:1], owner, token).Int64Slice()
	if err != nil {
		return 0, 0, lock.Unavailable(ctx, "redis", err)
	}
	if err := statusErr(res[0]); err != nil {
		return 0, 0, err
	}
	if len(res) != 2 {
		return 0, 0, lock.Unavailable(ctx, "redis", fmt.Errorf("release script returned %v", res))
	}
	return uint32(res[0]), uint64(res[1]), nil
}

// Renew implements lock.Backend.
func (b *Backend) Renew(ctx context.Context, key, owner string, ttl time.Duration) (lock.Lease, error) {
	start := time.Now()
	res, err := renewScript.Run(ctx, b.rdb, b.keys(key)[:1], owner, ttl.Milliseconds()).Slice()
	if err != nil {
		return lock.Lease{}, lock.Unavailable(ctx, "redis", err)
	}
	if err := statusErr(toInt(res[0])); err != nil {
		return lock.Lease{}, err
	}
	if len(res) != 4 {
		return lock.Lease{}, fmt.Errorf("redislock: renew script returned %d values", len(res))
	}
	return lock.Lease{
		Key: key, Owner: owner, FencingToken: uint64(toInt(res[1])),
		ExpiresAt: start.Add(time.Duration(toInt(res[3])) * time.Millisecond), HoldCount: uint32(toInt(res[2])),
	}, nil
}

// Inspect implements lock.Backend.
func (b *Backend) Inspect(ctx context.Context, key string) (lock.State, error) {
	res, err := InspectScript.Run(ctx, b.rdb, b.keys(key)[:1]).Slice()
	if err != nil {
		return lock.State{}, lock.Unavailable(ctx, "redis", err)
	}
	if toInt(res[0]) != 1 {
		return lock.State{}, nil
	}
	holder, _ := res[4].(string)
	return lock.State{
		Held: true, HolderID: lock.HolderID(holder), FencingToken: uint64(toInt(res[1])),
		ExpiresAt: time.Now().Add(time.Duration(toInt(res[3])) * time.Millisecond), HoldCount: uint32(toInt(res[2])),
	}, nil
}

// Close implements lock.Backend; the Redis client stays open for its owner to close.
func (b *Backend) Close() error { return nil }

// statusErr maps the scripts' negative status codes to lock errors.
func statusErr(n int64) error {
	switch n {
	case -1:
		return lock.ErrNotHeld
	case -2:
		return lock.ErrNotOwner
	}
	return nil
}

func toInt(v any) int64 {
	n, _ := v.(int64)
	return n
}
