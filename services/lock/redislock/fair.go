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
	res, err := fairAcquireScript.Run(ctx, b.rdb, keys, owner, ttl.Milliseconds(), lock.MaxHoldCount, entryTTL.Milliseconds(), graceMs, lock.NewHolderID()).Slice()
	if err != nil {
		return lock.Attempt{}, lock.Unavailable(ctx, "redis", err)
	}
	if len(res) != 8 {
		return lock.Attempt{}, fmt.Errorf("redislock: fair acquire script returned %d values", len(res))
	}
	att, err := b.attempt(res, key, owner, start)
	if err == nil && !att.Acquired {
		att.Place, att.Arrival = int(toInt(res[6])), toInt(res[7])
	}
	return att, err
}

// LeaveQueue implements lock.QueueBackend.
func (b *Backend) LeaveQueue(ctx context.Context, key, owner string) error {
	if err := leaveQueueScript.Run(ctx, b.rdb, b.layout.QueueKeys(key), owner).Err(); err != nil {
		return lock.Unavailable(ctx, "redis", err)
	}
	return nil
}
