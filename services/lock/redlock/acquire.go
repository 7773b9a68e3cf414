package redlock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/redislock"
)

// nodeStatus is how one node answered an acquire's first round.
type nodeStatus int

const (
	// nodeFailed gave no usable answer: it may or may not have taken the lock.
	nodeFailed nodeStatus = iota
	// nodeBusy is held there by another owner.
	nodeBusy
	// nodeTaken was free and now holds the lock for the owner, unconfirmed (fence 0).
	nodeTaken
	// nodeReentered already held it for the owner and counted one more hold.
	nodeReentered
)

// firstRound is one node's answer to acquireScript.
type firstRound struct {
	status  nodeStatus
	counter uint64 // the node's fencing counter
	count   int64  // hold count after the script
	fence   uint64 // the lock's token on the node; 0 when taken or unconfirmed
	pttl    time.Duration
	holder  string // the other owner, when busy
	err     error  // why the node failed
}

// attempt is one TryAcquire in progress.
type attempt struct {
	b          *Backend
	key, owner string
	keys       []string
	ttl        time.Duration
	timeout    time.Duration
	start      time.Time
	nodes      []firstRound
}

// TryAcquire implements lock.Backend; the package doc describes the two rounds and what
// every mix of node answers means.
func (b *Backend) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Attempt, error) {
	if err := checkTTL(ttl); err != nil {
		return lock.Attempt{}, err
	}
	a := &attempt{
		b: b, key: key, owner: owner, keys: b.keys(key),
		ttl: ttl, timeout: b.nodeTimeout(ttl), start: time.Now(),
	}
	a.firstRound(ctx)

	var taken, reentered, busy int
	for _, n := range a.nodes {
		switch n.status {
		case nodeTaken:
			taken++
		case nodeReentered:
			reentered++
		case nodeBusy:
			busy++
		}
	}
	q := b.quorum()
	failed := len(a.nodes) - taken - reentered - busy
	switch {
	case reentered >= q:
		return a.reenter(ctx)
	case reentered > 0 && reentered+failed >= q:
		// The owner's lease may still stand on nodes that did not answer: taking the lock
		// anew would hand out a new token and reset the hold count under a live outer hold.
		a.undo(ctx, 0)
		return lock.Attempt{}, b.unavailable(ctx, "acquire", taken+reentered+busy, a.failures())
	case taken+reentered >= q:
		return a.take(ctx)
	}
	a.undo(ctx, 0)
	if answered := taken + reentered + busy; answered < q {
		return lock.Attempt{}, b.unavailable(ctx, "acquire", answered, a.failures())
	}
	hs := holders{}
	for _, n := range a.nodes {
		if n.status == nodeBusy {
			hs.add(n.holder, n.fence, n.count, n.pttl)
		}
	}
	return lock.Attempt{Holder: hs.top().state(q)}, nil
}

// firstRound runs acquireScript on every node.
func (a *attempt) firstRound(ctx context.Context) {
	replies := fanOut(ctx, a.b, a.timeout, nil, func(ctx context.Context, _ int, rdb redis.Scripter) (firstRound, error) {
		vals, err := acquireScript.Run(ctx, rdb, a.keys, a.owner, a.ttl.Milliseconds()).Slice()
		if err != nil {
			return firstRound{}, err
		}
		v, err := ints("acquire", vals, 6)
		if err != nil {
			return firstRound{}, err
		}
		n := firstRound{
			counter: uint64(v[1]), count: v[2], fence: uint64(v[3]),
			pttl: time.Duration(v[4]) * time.Millisecond,
		}
		switch v[0] {
		case 1:
			n.status = nodeTaken
		case 2:
			n.status = nodeReentered
		default:
			n.status = nodeBusy
			n.holder, _ = vals[5].(string)
		}
		return n, nil
	})
	a.nodes = make([]firstRound, len(replies))
	for i, r := range replies {
		a.nodes[i] = r.val
		if r.err != nil {
			a.nodes[i] = firstRound{status: nodeFailed, err: r.err}
		}
	}
}

// take turns a majority of first-round takes into a new lease: it picks a token above every
// counter seen and confirms it on a majority before anyone is told, so that any later
// majority meets a node that knows it.
func (a *attempt) take(ctx context.Context) (lock.Attempt, error) {
	var token uint64
	for _, n := range a.nodes {
		token = max(token, n.counter)
	}
	token++
	stamped, errs := a.stamp(ctx, token, 1, func(n firstRound) bool {
		return n.status == nodeTaken || n.status == nodeReentered
	})
	if q := a.b.quorum(); stamped < q {
		a.undo(ctx, token)
		if ctx.Err() != nil {
			return lock.Attempt{}, context.Cause(ctx)
		}
		return lock.Attempt{}, fmt.Errorf("redlock: acquire: %w: token %d confirmed on %d of %d nodes, %d needed (%s)",
			lock.ErrUnavailable, token, stamped, len(a.nodes), q, joinNodeErrs(errs))
	}
	return a.lease(ctx, token, 1)
}

// reenter completes a re-entry: a majority already held the lock for the owner, so the token
// and count are theirs. Nodes that disagree with them are rewritten, best effort: the
// majority already makes the lease.
func (a *attempt) reenter(ctx context.Context) (lock.Attempt, error) {
	var token uint64
	var counts []int64
	for _, n := range a.nodes {
		if n.status == nodeReentered {
			token = max(token, n.fence)
			counts = append(counts, n.count)
		}
	}
	q := a.b.quorum()
	if token == 0 {
		// The owner's own earlier acquire is between its rounds; the lease is not confirmed,
		// so neither is this re-entry. Busy, held by itself: the retry re-enters.
		a.undo(ctx, 0)
		hs := holders{}
		for _, n := range a.nodes {
			if n.status == nodeReentered {
				hs.add(a.owner, 0, n.count-1, n.pttl)
			}
		}
		return lock.Attempt{Holder: hs.top().state(q)}, nil
	}
	count := quorumValue(counts, q)
	a.stamp(ctx, token, count, func(n firstRound) bool {
		return (n.status == nodeTaken || n.status == nodeReentered) && (n.fence != token || n.count != count)
	})
	return a.lease(ctx, token, count)
}

// lease returns the acquired lease with its validity, or gives everything back when the
// rounds used up the ttl.
func (a *attempt) lease(ctx context.Context, token uint64, count int64) (lock.Attempt, error) {
	v := validity(a.start, a.ttl)
	if v <= 0 {
		a.undo(ctx, token)
		return lock.Attempt{}, a.b.expired(ctx, "acquire", a.start, a.ttl)
	}
	return lock.Attempt{Acquired: true, Lease: lock.Lease{
		Key: a.key, Owner: a.owner, FencingToken: token,
		ExpiresAt: a.start.Add(a.ttl - Drift(a.ttl)), HoldCount: uint32(count),
	}}, nil
}

// stamp runs stampScript with token and count on the nodes pick selects and returns how many
// confirmed it.
func (a *attempt) stamp(ctx context.Context, token uint64, count int64, pick func(firstRound) bool) (int, []nodeErr) {
	replies := fanOut(ctx, a.b, a.timeout, func(i int) bool { return pick(a.nodes[i]) },
		func(ctx context.Context, i int, rdb redis.Scripter) (int64, error) {
			return stampScript.Run(ctx, rdb, a.keys, a.owner, token, count, a.nodes[i].count).Int64()
		})
	stamped := 0
	for _, r := range replies {
		if r.err == nil && r.val == 1 {
			stamped++
		}
	}
	return stamped, failures(a.b, replies)
}

// undo gives back what this attempt may have done, on every node but those another owner
// holds: a re-entered node loses the hold it gained; a taken node, or one that did not answer
// and may have taken the lock and lost the reply, is deleted while it carries this owner and
// an unconfirmed token or this attempt's. It runs even when ctx ended, since the request
// ending is one of the reasons to undo.
func (a *attempt) undo(ctx context.Context, token uint64) {
	ctx = context.WithoutCancel(ctx)
	tok := strconv.FormatUint(token, 10)
	fanOut(ctx, a.b, a.timeout, func(i int) bool { return a.nodes[i].status != nodeBusy },
		func(ctx context.Context, i int, rdb redis.Scripter) (struct{}, error) {
			if a.nodes[i].status == nodeReentered {
				return struct{}{}, redislock.ReleaseScript.Run(ctx, rdb, a.keys[:1], a.owner).Err()
			}
			return struct{}{}, dropScript.Run(ctx, rdb, a.keys[:1], a.owner, tok).Err()
		})
}

// failures lists the nodes that failed the first round.
func (a *attempt) failures() []nodeErr {
	var errs []nodeErr
	for i, n := range a.nodes {
		if n.status == nodeFailed {
			errs = append(errs, nodeErr{a.b.nodes[i].name, n.err})
		}
	}
	return errs
}

// expired is the error of a call that took so long that no validity is left of its ttl.
func (b *Backend) expired(ctx context.Context, op string, start time.Time, ttl time.Duration) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return fmt.Errorf("redlock: %s: %w: took %v of a %v ttl, leaving no validity",
		op, lock.ErrUnavailable, time.Since(start).Round(time.Millisecond), ttl)
}
