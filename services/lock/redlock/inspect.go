package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/redislock"
)

// Inspect implements lock.Backend with a majority view: the lock is held when a majority of
// nodes agree on its owner, free when no owner can have a majority even counting the nodes
// that did not answer, and unknown (lock.ErrUnavailable) in between.
func (b *Backend) Inspect(ctx context.Context, key string) (lock.State, error) {
	keys := b.keys(key)[:1]
	type view struct {
		held       bool
		owner, att string
		fence      uint64
		count      int64
		pttl       time.Duration
	}
	replies := fanOut(ctx, b, b.timeout, nil, func(ctx context.Context, _ int, rdb redis.Scripter) (view, error) {
		vals, err := redislock.InspectScript.Run(ctx, rdb, keys).Slice()
		if err != nil || len(vals) == 1 {
			return view{}, err
		}
		v, err := ints("inspect", vals, 7)
		if err != nil {
			return view{}, err
		}
		owner, _ := vals[5].(string)
		att, _ := vals[6].(string)
		return view{held: true, owner: owner, att: att, fence: uint64(v[1]), count: v[2], pttl: time.Duration(v[3]) * time.Millisecond}, nil
	})
	hs := holders{}
	for _, r := range replies {
		if r.err == nil && r.val.held {
			hs.add(r.val.owner, r.val.att, r.val.fence, r.val.count, r.val.pttl)
		}
	}
	errs := failures(b, replies)
	q := b.quorum()
	if answered := len(b.nodes) - len(errs); answered < q {
		return lock.State{}, b.unavailable(ctx, "inspect", answered, errs)
	}
	top := hs.top()
	switch {
	case top == nil:
		return lock.State{}, nil
	case len(top.counts) >= q:
		return top.state(q), nil
	case len(top.counts)+len(errs) >= q:
		// The owner may hold the nodes that did not answer too, and so a majority.
		return lock.State{}, lock.Unavailable(ctx, engine, fmt.Errorf("inspect: an owner holds %d of %d nodes and %d did not answer, %d make a majority (%s)",
			len(top.counts), len(b.nodes), len(errs), q, joinNodeErrs(errs)))
	}
	return lock.State{}, nil
}
