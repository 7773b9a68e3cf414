package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

var _ lock.QueueBackend = (*Backend)(nil)

// TryAcquireFair implements lock.QueueBackend: one script takes the lock for the first live
// waiter in key's line, or keeps owner's place in it.
func (b *Backend) TryAcquireFair(ctx context.Context, key, owner string, ttl, entryTTL time.Duration) (lock.Attempt, error) {
	start := time.Now()
	keys := append(b.keys(key), b.layout.QueueKeys(key)...)
	res, err := fairAcquireScript.Run(ctx, b.rdb, keys, owner, ttl.Milliseconds(), lock.MaxHoldCount, entryTTL.Milliseconds()).Slice()
	if err != nil {
		return lock.Attempt{}, lock.Unavailable(ctx, "redis", err)
	}
	if len(res) != 7 {
		return lock.Attempt{}, fmt.Errorf("redislock: fair acquire script returned %d values", len(res))
	}
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
	att := lock.Attempt{Place: int(toInt(res[5])), Arrival: toInt(res[6])}
	if holder, _ := res[4].(string); holder != "" {
		att.Holder = lock.State{
			Held: true, HolderID: lock.HolderID(holder), FencingToken: uint64(fence),
			ExpiresAt: time.Now().Add(time.Duration(ms) * time.Millisecond), HoldCount: uint32(count),
		}
	}
	return att, nil
}

// LeaveQueue implements lock.QueueBackend.
func (b *Backend) LeaveQueue(ctx context.Context, key, owner string) error {
	if err := leaveQueueScript.Run(ctx, b.rdb, b.layout.QueueKeys(key), owner).Err(); err != nil {
		return lock.Unavailable(ctx, "redis", err)
	}
	return nil
}
