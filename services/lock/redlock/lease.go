package redlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/redislock"
)

// Release implements lock.Backend: it drops one hold on every node and succeeds when a
// majority of nodes held the lock for owner. The holds left are those a majority vouch for.
func (b *Backend) Release(ctx context.Context, key, owner string) (uint32, error) {
	keys := b.keys(key)[:1]
	replies := fanOut(ctx, b, b.timeout, nil, func(ctx context.Context, _ int, rdb redis.Scripter) (int64, error) {
		return redislock.ReleaseScript.Run(ctx, rdb, keys, owner).Int64()
	})
	var left []int64
	var notHeld, other int
	for _, r := range replies {
		switch {
		case r.err != nil:
		case r.val == -1:
			notHeld++
		case r.val == -2:
			other++
		default:
			left = append(left, r.val)
		}
	}
	errs := failures(b, replies)
	if len(left) < b.quorum() {
		return 0, b.refusal(ctx, "release", len(left), notHeld, other, errs)
	}
	remaining := quorumValue(left, b.quorum())
	if remaining == 0 {
		b.purge(ctx, keys, owner, replies)
	}
	return uint32(remaining), nil
}

// purge deletes owner's hash on the nodes that still counted holds after a release the
// majority says freed the lock (their counts had drifted from the majority's after some
// earlier partial failure), so that no minority hold lingers until its ttl. Best effort.
func (b *Backend) purge(ctx context.Context, keys []string, owner string, released []reply[int64]) {
	fanOut(context.WithoutCancel(ctx), b, b.timeout, func(i int) bool {
		return released[i].err == nil && released[i].val > 0
	}, func(ctx context.Context, _ int, rdb redis.Scripter) (struct{}, error) {
		return struct{}{}, dropScript.Run(ctx, rdb, keys, owner, "*").Err()
	})
}

// Renew implements lock.Backend: it extends the lease on every node that holds it for owner
// and succeeds when a majority did, with the validity left after the round, as an acquire.
func (b *Backend) Renew(ctx context.Context, key, owner string, ttl time.Duration) (lock.Lease, error) {
	if err := checkTTL(ttl); err != nil {
		return lock.Lease{}, err
	}
	start := time.Now()
	keys := b.keys(key)[:1]
	replies := fanOut(ctx, b, b.nodeTimeout(ttl), nil, func(ctx context.Context, _ int, rdb redis.Scripter) ([]int64, error) {
		vals, err := redislock.RenewScript.Run(ctx, rdb, keys, owner, ttl.Milliseconds()).Slice()
		if err != nil {
			return nil, err
		}
		if len(vals) == 1 {
			return []int64{toInt(vals[0])}, nil
		}
		return ints("renew", vals, 3)
	})
	var token uint64
	var counts []int64
	var notHeld, other int
	for _, r := range replies {
		switch {
		case r.err != nil:
		case r.val[0] == -1:
			notHeld++
		case r.val[0] == -2:
			other++
		case len(r.val) == 3:
			token = max(token, uint64(r.val[1]))
			counts = append(counts, r.val[2])
		}
	}
	q := b.quorum()
	if len(counts) < q {
		return lock.Lease{}, b.refusal(ctx, "renew", len(counts), notHeld, other, failures(b, replies))
	}
	v := validity(start, ttl)
	if v <= 0 {
		return lock.Lease{}, b.expired(ctx, "renew", start, ttl)
	}
	return lock.Lease{
		Key: key, Owner: owner, FencingToken: token,
		ExpiresAt: start.Add(ttl - Drift(ttl)), HoldCount: uint32(quorumValue(counts, q)),
	}, nil
}
