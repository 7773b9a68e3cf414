package redlock

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/services/lock"
)

// nodeStatus is how one node answered an acquire's first round.
type nodeStatus int

const (
	// nodeFailed gave no usable answer: it may or may not have taken or re-entered the lock.
	nodeFailed nodeStatus = iota
	// nodeBusy is held there by another owner.
	nodeBusy
	// nodeTaken was free and now holds this attempt's pending take (fence 0).
	nodeTaken
	// nodeReentered held a lease of the owner (confirmed, or a pending take of another
	// attempt) and counted one more hold on it.
	nodeReentered
)

// firstRound is one node's answer to acquireScript.
type firstRound struct {
	status  nodeStatus
	counter uint64 // the node's fencing counter
	count   int64  // hold count after the script
	fence   uint64 // the lock's token on the node; 0 when pending
	pttl    time.Duration
	holder  string // the owner holding it, when busy
	att     string // the identity of the lease this attempt counted a hold on, or the holder's when busy
	err     error  // why the node failed
	undone  bool   // what this attempt did here was given back
}

// attempt is one TryAcquire in progress.
type attempt struct {
	b          *Backend
	key, owner string
	id         string // random: tells this attempt's pending takes from any other's
	keys       []string
	ttl        time.Duration
	timeout    time.Duration
	start      time.Time
	nodes      []firstRound
	token      uint64 // the token this attempt stamped its takes with, once it did
}

// tally counts the first round's answers. lease is the identity (att) of the newest
// confirmed lease of the owner the nodes counted a hold on (the highest fence), token its
// fence, and reentered the nodes that counted one on it, confirmed or still pending there;
// holds counted on anything else of the owner's (an older lease's leftovers, a take that no
// node confirmed yet) are in other.
type tally struct {
	lease                                 string
	token                                 uint64
	taken, reentered, other, busy, failed int
}

func (a *attempt) tally() tally {
	var t tally
	for _, n := range a.nodes {
		if n.status == nodeReentered && n.fence > t.token {
			t.token, t.lease = n.fence, n.att
		}
	}
	for _, n := range a.nodes {
		switch {
		case n.status == nodeTaken:
			t.taken++
		case n.status == nodeReentered && t.lease != "" && n.att == t.lease:
			t.reentered++
		case n.status == nodeReentered:
			t.other++
		case n.status == nodeBusy:
			t.busy++
		default:
			t.failed++
		}
	}
	return t
}

// TryAcquire implements lock.Backend; the package doc describes the two rounds and what
// every mix of node answers means.
func (b *Backend) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Attempt, error) {
	if err := checkTTL(ttl); err != nil {
		return lock.Attempt{}, err
	}
	a := &attempt{
		b: b, key: key, owner: owner, id: rand.Text(), keys: b.keys(key),
		ttl: ttl, timeout: b.nodeTimeout(ttl), start: time.Now(),
	}
	a.firstRound(ctx)

	t := a.tally()
	q := b.quorum()
	switch {
	case t.reentered >= q:
		return a.reenter(ctx, t)
	case t.taken >= q:
		return a.take(ctx)
	}
	a.undo(ctx, nil)
	answered := len(a.nodes) - t.failed
	if answered < q {
		return lock.Attempt{}, b.unavailable(ctx, "acquire", answered, a.failures())
	}
	mine := t.reentered + t.other
	if mine > 0 && mine < q && mine+t.failed >= q {
		// The owner's lease may stand on nodes that did not answer: taking the lock anew
		// would hand out a new token and reset the hold count under a live outer hold.
		return lock.Attempt{}, b.unavailable(ctx, "acquire", answered, a.failures())
	}
	// Contended: by another owner, by two tries that split the nodes, or by the owner's own
	// acquire still between its rounds (the retry re-enters once it confirmed its token).
	hs := holders{}
	for _, n := range a.nodes {
		switch n.status {
		case nodeBusy:
			hs.add(n.holder, n.att, n.fence, n.count, n.pttl)
		case nodeReentered:
			hs.add(a.owner, n.att, n.fence, n.count-1, n.pttl)
		}
	}
	top := hs.top()
	// With no owner on a majority, tries split the nodes (or a holder stands on nodes that
	// did not answer): a waiter tries again soon rather than wait for a release event that
	// may never come.
	return lock.Attempt{Holder: top.state(q), Raced: len(top.counts) < q}, nil
}

// firstRound runs acquireScript on every node.
func (a *attempt) firstRound(ctx context.Context) {
	replies := fanOut(ctx, a.b, a.timeout, nil, func(ctx context.Context, _ int, rdb redis.Scripter) (firstRound, error) {
		vals, err := acquireScript.Run(ctx, rdb, a.keys, a.owner, a.ttl.Milliseconds(), a.id).Slice()
		if err != nil {
			return firstRound{}, err
		}
		v, err := ints("acquire", vals, 7)
		if err != nil {
			return firstRound{}, err
		}
		n := firstRound{
			counter: uint64(v[1]), count: v[2], fence: uint64(v[3]),
			pttl: time.Duration(v[4]) * time.Millisecond,
		}
		n.holder, _ = vals[5].(string)
		n.att, _ = vals[6].(string)
		switch v[0] {
		case 1:
			n.status = nodeTaken
		case 2:
			n.status = nodeReentered
		default:
			n.status = nodeBusy
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
// majority meets a node that knows it. Holds counted on leftovers of an older lease of the
// owner (which no majority holds any more) are given back.
func (a *attempt) take(ctx context.Context) (lock.Attempt, error) {
	var token uint64
	for _, n := range a.nodes {
		token = max(token, n.counter)
	}
	token++
	a.token = token
	a.undo(ctx, func(n firstRound) bool { return n.status == nodeReentered })
	tok := strconv.FormatUint(token, 10)
	replies := fanOut(ctx, a.b, a.timeout, func(i int) bool { return a.nodes[i].status == nodeTaken },
		func(ctx context.Context, _ int, rdb redis.Scripter) (int64, error) {
			return stampScript.Run(ctx, rdb, a.keys, a.owner, tok, a.id).Int64()
		})
	stamped := 0
	for _, r := range replies {
		if r.err == nil && r.val == 1 {
			stamped++
		}
	}
	q := a.b.quorum()
	if stamped < q {
		a.undo(ctx, nil)
		return lock.Attempt{}, lock.Unavailable(ctx, engine, fmt.Errorf("acquire: token %d confirmed on %d of %d nodes, %d needed (%s)",
			token, stamped, len(a.nodes), q, joinNodeErrs(failures(a.b, replies))))
	}
	// A node that did not answer the first round may hold a take of this attempt that is
	// never stamped; it is not chased on success (a hung node would cost another timeout):
	// it blocks that one node until its ttl, which the majority does without.
	return a.lease(ctx, token, 1, a.id)
}

// reenter completes a re-entry: a majority counted one more hold on the owner's lease t.lease,
// exactly, so its token and count are the answer. No node is rewritten: while other calls of
// the same owner are in flight the nodes' counts differ for a moment, and copying one node's
// count onto another would make that difference permanent (that is how concurrent re-entries
// once freed a held lock). What this attempt did elsewhere (a take of a node that lost the
// lease, a hold on an older lease's leftovers) is given back: the majority makes the lease.
func (a *attempt) reenter(ctx context.Context, t tally) (lock.Attempt, error) {
	var counts []int64
	for _, n := range a.nodes {
		if n.status == nodeReentered && n.att == t.lease {
			counts = append(counts, n.count)
		}
	}
	a.undo(ctx, func(n firstRound) bool {
		return n.status == nodeTaken || n.status == nodeReentered && n.att != t.lease
	})
	count := quorumValue(counts, a.b.quorum())
	if count > lock.MaxHoldCount {
		// Decided on the majority's count, not per node, so that two racing re-entries at
		// the limit cannot each be refused on a different node and leave counts uneven. Races
		// at the limit can still let the count pass it by the re-entries in flight: the nodes
		// count in 64 bits and answers are clamped, so nothing wraps.
		a.undo(ctx, nil)
		return lock.Attempt{}, fmt.Errorf("redlock: %w (%d)", lock.ErrHoldLimit, count-1)
	}
	return a.lease(ctx, t.token, count, t.lease)
}

// lease returns the acquired lease with its validity, or gives back what the attempt did
// when the rounds used up the ttl; att is the lease's identity, which names its holder id.
func (a *attempt) lease(ctx context.Context, token uint64, count int64, att string) (lock.Attempt, error) {
	v := validity(a.start, a.ttl)
	if v <= 0 {
		a.undo(ctx, nil)
		return lock.Attempt{}, a.b.expired(ctx, "acquire", a.start, a.ttl)
	}
	return lock.Attempt{Acquired: true, Lease: lock.Lease{
		Key: a.key, Owner: a.owner, HolderID: holderID(att), FencingToken: token,
		ExpiresAt: a.start.Add(a.ttl - Drift(a.ttl)), HoldCount: holdCount(count),
	}}, nil
}

// undo gives back what this attempt did on the nodes pick selects (every node where it may
// have done something when pick is nil), once per node: a pending take of this attempt is
// deleted, and a hold it counted (a re-entry, or its own stamped take, on which the owner's
// other calls may have re-entered since) is dropped as a release would, never deleting more
// than that one hold. A node that did not answer may have taken the lock and lost the reply,
// so it is asked too, but only a take of this attempt is deleted there: whether it counted a
// re-entry is unknown, and a hold it cannot prove is left to the lease's ttl. It runs even
// when ctx ended, since the request ending is one of the reasons to undo.
func (a *attempt) undo(ctx context.Context, pick func(firstRound) bool) {
	ctx = context.WithoutCancel(ctx)
	fanOut(ctx, a.b, a.timeout, func(i int) bool {
		n := a.nodes[i]
		switch {
		case n.undone:
			return false
		case pick != nil:
			return pick(n)
		}
		return n.status == nodeTaken || n.status == nodeReentered || n.status == nodeFailed
	}, func(ctx context.Context, i int, rdb redis.Scripter) (struct{}, error) {
		lease := a.nodes[i].att // the lease this attempt counted a hold on here
		if a.nodes[i].status != nodeReentered {
			lease = a.id // its own take, which a lost reply may hide
		}
		a.nodes[i].undone = true
		return struct{}{}, undoScript.Run(ctx, rdb, a.keys[:1], a.owner, lease).Err()
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
	return lock.Unavailable(ctx, engine, fmt.Errorf("%s: took %v of a %v ttl, leaving no validity",
		op, time.Since(start).Round(time.Millisecond), ttl))
}
