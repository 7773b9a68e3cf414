package redlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/services/lock"
)

// Release implements lock.Backend: it drops one hold on every node and succeeds when a
// majority of nodes held the lock for owner. The holds left are those a majority vouch for.
// A node frees the key when its own count reaches 0; nothing deletes a node that still
// counts holds, since while calls of the owner are in flight a count above the majority's
// may be a hold that is about to be reported acquired. (A node left counting a hold whose
// reply was lost holds a minority until its ttl.)
func (b *Backend) Release(ctx context.Context, key, owner string, token uint64) (uint32, lock.Released, error) {
	keys := b.keys(key)[:1]
	type released struct {
		v   []int64 // {holds left, fence}, or {status} when refused
		att string
	}
	replies := fanOut(ctx, b, b.timeout, nil, func(ctx context.Context, _ int, rdb redis.Scripter) (released, error) {
		vals, err := releaseScript.Run(ctx, rdb, keys, owner, token).Slice()
		if err != nil {
			return released{}, err
		}
		if len(vals) == 1 {
			return released{v: []int64{toInt(vals[0])}}, nil
		}
		v, err := ints("release", vals, 3)
		if err != nil {
			return released{}, err
		}
		att, _ := vals[2].(string)
		return released{v: v[:2], att: att}, nil
	})
	var left, fences []int64
	atts := map[int64]string{} // by fence: the lease's identity
	var notHeld, other int
	for _, r := range replies {
		switch {
		case r.err != nil:
		case r.val.v[0] == -1:
			notHeld++
		case r.val.v[0] == -2:
			other++
		case len(r.val.v) == 2:
			left, fences = append(left, r.val.v[0]), append(fences, r.val.v[1])
			atts[r.val.v[1]] = r.val.att
		}
	}
	errs := failures(b, replies)
	if len(left) < b.quorum() {
		return 0, lock.Released{}, b.refusal(ctx, "release", len(left), notHeld, other, errs)
	}
	fence := quorumValue(fences, b.quorum())
	return holdCount(quorumValue(left, b.quorum())), lock.Released{FencingToken: uint64(fence), HolderID: holderID(atts[fence])}, nil
}

// Renew implements lock.Backend: it extends the lease on every node that holds it for owner
// and succeeds when a majority did, with the validity left after the round, as an acquire.
// With ttl 0 each node renews for the lease's own ttl, and the lease's length is the one a
// majority renewed for.
func (b *Backend) Renew(ctx context.Context, key, owner string, ttl time.Duration) (lock.Lease, error) {
	if ttl != 0 {
		if err := checkTTL(ttl); err != nil {
			return lock.Lease{}, err
		}
	}
	start := time.Now()
	keys := b.keys(key)[:1]
	timeout := b.timeout
	if ttl != 0 {
		timeout = b.nodeTimeout(ttl)
	}
	replies := fanOut(ctx, b, timeout, nil, func(ctx context.Context, _ int, rdb redis.Scripter) ([]int64, error) {
		vals, err := renewScript.Run(ctx, rdb, keys, owner, ttl.Milliseconds()).Slice()
		if err != nil {
			return nil, err
		}
		if len(vals) == 1 {
			return []int64{toInt(vals[0])}, nil
		}
		return ints("renew", vals, 4)
	})
	var token uint64
	var counts []int64
	var ttls []time.Duration
	var notHeld, other int
	for _, r := range replies {
		switch {
		case r.err != nil:
		case r.val[0] == -1:
			notHeld++
		case r.val[0] == -2:
			other++
		case len(r.val) == 4:
			token = max(token, uint64(r.val[1]))
			counts = append(counts, r.val[2])
			ttls = append(ttls, time.Duration(r.val[3])*time.Millisecond)
		}
	}
	q := b.quorum()
	if len(counts) < q {
		return lock.Lease{}, b.refusal(ctx, "renew", len(counts), notHeld, other, failures(b, replies))
	}
	granted := quorumValue(ttls, q)
	if validity(start, granted) <= 0 {
		return lock.Lease{}, b.expired(ctx, "renew", start, granted)
	}
	return lock.Lease{
		Key: key, Owner: owner, FencingToken: token,
		ExpiresAt: start.Add(granted - Drift(granted)), HoldCount: holdCount(quorumValue(counts, q)),
	}, nil
}
