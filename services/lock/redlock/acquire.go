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
	// nodeReentered held a confirmed lease of the owner and counted one more hold.
	nodeReentered
	// nodePending holds another attempt's pending take of the same owner; nothing changed.
	nodePending
	// nodeAtLimit holds the owner's lease at the highest hold count; nothing changed.
	nodeAtLimit
)

// firstRound is one node's answer to acquireScript.
type firstRound struct {
	status  nodeStatus
	counter uint64 // the node's fencing counter
	count   int64  // hold count after the script
	fence   uint64 // the lock's token on the node; 0 when pending
	pttl    time.Duration
	holder  string // the owner holding it, when busy or pending
	err     error  // why the node failed
	joined  bool   // a second round made it a loose member of this attempt's lease
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
}

// tally counts the first round's answers by status.
type tally struct{ taken, reentered, pending, atLimit, busy, failed int }

func (a *attempt) tally() tally {
	var t tally
	for _, n := range a.nodes {
		switch n.status {
		case nodeTaken:
			t.taken++
		case nodeReentered:
			t.reentered++
		case nodePending:
			t.pending++
		case nodeAtLimit:
			t.atLimit++
		case nodeBusy:
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
		return a.reenter(ctx)
	case t.atLimit > 0 && t.atLimit+t.reentered >= q:
		a.undo(ctx, 0)
		return lock.Attempt{}, fmt.Errorf("redlock: %w", lock.ErrHoldLimit)
	case t.taken >= q:
		return a.take(ctx)
	}
	a.undo(ctx, 0)
	answered := len(a.nodes) - t.failed
	if answered < q {
		return lock.Attempt{}, b.unavailable(ctx, "acquire", answered, a.failures())
	}
	mine := t.reentered + t.pending + t.atLimit
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
		case nodeBusy, nodePending, nodeAtLimit:
			hs.add(n.holder, n.fence, n.count, n.pttl)
		case nodeReentered:
			hs.add(a.owner, n.fence, n.count-1, n.pttl)
		}
	}
	return lock.Attempt{Holder: hs.top().state(q)}, nil
}

// firstRound runs acquireScript on every node.
func (a *attempt) firstRound(ctx context.Context) {
	replies := fanOut(ctx, a.b, a.timeout, nil, func(ctx context.Context, _ int, rdb redis.Scripter) (firstRound, error) {
		vals, err := acquireScript.Run(ctx, rdb, a.keys, a.owner, a.ttl.Milliseconds(), a.id, lock.MaxHoldCount).Slice()
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
		n.holder, _ = vals[5].(string)
		switch v[0] {
		case 1:
			n.status = nodeTaken
		case 2:
			n.status = nodeReentered
		case 3:
			n.status = nodePending
		case 4:
			n.status = nodeAtLimit
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
// majority meets a node that knows it. A node that still carried an older lease of the owner
// (which no majority holds any more) joins the new lease as a loose node.
func (a *attempt) take(ctx context.Context) (lock.Attempt, error) {
	var token uint64
	for _, n := range a.nodes {
		token = max(token, n.counter)
	}
	token++
	ok, errs := a.secondRound(ctx, token, 1, func(n firstRound) bool { return n.status == nodeReentered })
	if q := a.b.quorum(); ok < q {
		a.undo(ctx, token)
		return lock.Attempt{}, lock.Unavailable(ctx, engine, fmt.Errorf("acquire: token %d confirmed on %d of %d nodes, %d needed (%s)",
			token, ok, len(a.nodes), q, joinNodeErrs(errs)))
	}
	return a.lease(ctx, token, 1, token)
}

// reenter completes a re-entry: a majority held a confirmed lease of the owner and counted one
// more hold, exactly, so the token and count are theirs and those nodes are left alone (their
// counts may differ for a moment while other calls of the owner are in flight; rewriting them
// would make that difference permanent). Nodes that had lost the lease or never confirmed it
// join it as loose nodes, best effort: the majority already makes the lease.
func (a *attempt) reenter(ctx context.Context) (lock.Attempt, error) {
	var token uint64
	var counts []int64
	for _, n := range a.nodes {
		if n.status == nodeReentered {
			token = max(token, n.fence)
			counts = append(counts, n.count)
		}
	}
	count := quorumValue(counts, a.b.quorum())
	a.secondRound(ctx, token, count, func(n firstRound) bool {
		return n.status == nodeTaken || n.status == nodePending || n.status == nodeReentered && n.fence != token
	})
	return a.lease(ctx, token, count, 0)
}

// secondRound confirms token on every node this attempt took (stampScript) and makes the
// nodes join picks loose members of the lease starting at count (joinScript); it returns how
// many nodes hold the lease with the token afterwards.
func (a *attempt) secondRound(ctx context.Context, token uint64, count int64, join func(firstRound) bool) (int, []nodeErr) {
	tok := strconv.FormatUint(token, 10)
	replies := fanOut(ctx, a.b, a.timeout, func(i int) bool {
		n := a.nodes[i]
		return n.status == nodeTaken || join(n)
	}, func(ctx context.Context, i int, rdb redis.Scripter) (int64, error) {
		if join(a.nodes[i]) {
			return joinScript.Run(ctx, rdb, a.keys, a.owner, tok, count).Int64()
		}
		return stampScript.Run(ctx, rdb, a.keys, a.owner, tok, a.id).Int64()
	})
	held := 0
	for i, r := range replies {
		switch {
		case r.err == nil && r.val == 1:
			held++
			a.nodes[i].joined = join(a.nodes[i])
		case a.nodes[i].status == nodeReentered && a.nodes[i].fence == token:
			held++ // re-entered and left alone
		}
	}
	return held, failures(a.b, replies)
}

// lease returns the acquired lease with its validity, or gives back what the attempt did
// when the rounds used up the ttl. created is the token when the attempt made a new lease
// (its nodes are dropped then), 0 for a re-entry (the live lease's nodes stay).
func (a *attempt) lease(ctx context.Context, token uint64, count int64, created uint64) (lock.Attempt, error) {
	v := validity(a.start, a.ttl)
	if v <= 0 {
		a.undo(ctx, created)
		return lock.Attempt{}, a.b.expired(ctx, "acquire", a.start, a.ttl)
	}
	return lock.Attempt{Acquired: true, Lease: lock.Lease{
		Key: a.key, Owner: a.owner, FencingToken: token,
		ExpiresAt: a.start.Add(a.ttl - Drift(a.ttl)), HoldCount: uint32(count),
	}}, nil
}

// undo gives back what this attempt did, on every node where it may have done something: a
// re-entered node loses the hold it gained; a taken node, one that joined, or one that did
// not answer (it may have taken the lock and lost the reply) is deleted while it carries this
// attempt's pending take or token, the new lease's token this attempt created (0 for none). Nodes holding another attempt's take, or
// another owner's lease, are left alone. It runs even when ctx ended, since the request
// ending is one of the reasons to undo. (A node that did not answer a re-entry may keep the
// hold it counted: it lingers on a minority until the lease's purge or ttl.)
func (a *attempt) undo(ctx context.Context, token uint64) {
	ctx = context.WithoutCancel(ctx)
	tok := strconv.FormatUint(token, 10)
	fanOut(ctx, a.b, a.timeout, func(i int) bool {
		switch a.nodes[i].status {
		case nodeTaken, nodeReentered, nodeFailed:
			return true
		}
		return a.nodes[i].joined
	}, func(ctx context.Context, i int, rdb redis.Scripter) (struct{}, error) {
		if n := a.nodes[i]; n.status == nodeReentered && !n.joined {
			return struct{}{}, releaseScript.Run(ctx, rdb, a.keys[:1], a.owner).Err()
		}
		return struct{}{}, dropScript.Run(ctx, rdb, a.keys[:1], a.owner, a.id, tok).Err()
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
