package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/services/lock"
)

// TryAcquire implements lock.Backend: re-entry when owner holds the lock, the holder when
// anyone else is first in line, and otherwise one place in line, kept only when it is first.
func (b *Backend) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Attempt, error) {
	return b.acquire(ctx, key, owner, ttl, 0)
}

// AcquireWait implements lock.FairBackend: it queues behind the line and waits, watching only
// its predecessor, until it is first, the wait passes (it leaves the line and reports the
// holder) or ctx ends.
func (b *Backend) AcquireWait(ctx context.Context, key, owner string, ttl, wait time.Duration) (lock.Attempt, error) {
	return b.acquire(ctx, key, owner, ttl, wait)
}

func (b *Backend) acquire(ctx context.Context, key, owner string, ttl, wait time.Duration) (lock.Attempt, error) {
	deadline := time.Now().Add(wait)
	parent := b.parentPath(key)
	// A cached lease at the hold limit may be stale (a release through another instance):
	// only a fresh read may refuse the re-entry.
	if e := b.cachedLease(parent, owner); e != nil && e.data.Holds < lock.MaxHoldCount {
		att, err := b.reenter(ctx, key, e, ttl)
		if !moved(err) {
			return att, err
		}
		b.leases.drop(e.path)
	}
	tries := 0
	for range maxSteps {
		v, err := b.liveHead(ctx, parent)
		if err != nil {
			return lock.Attempt{}, err
		}
		switch {
		case v.head != nil && v.head.holding() && v.head.data.Owner == owner:
			att, err := b.reenter(ctx, key, v.head, ttl)
			if moved(err) {
				continue
			}
			return att, err
		case wait > 0:
			return b.queue(ctx, key, parent, v.exists, owner, ttl, deadline)
		case v.head != nil:
			return lock.Attempt{Holder: b.stateOf(v.head)}, nil
		case tries == 2:
			// Two try-locks that keep seeing each other back off both: report a free lock
			// not taken rather than spin.
			return lock.Attempt{}, nil
		}
		tries++
		att, err := b.tryOnce(ctx, key, parent, v.exists, owner, ttl)
		if !errors.Is(err, errMoved) {
			return att, err
		}
	}
	return lock.Attempt{}, b.tooBusy(ctx, parent)
}

// tryOnce takes a place in a line that looked empty and keeps it when it is first; otherwise
// it gives it back and returns errMoved so the caller reports who is ahead. The node is born a
// lease (holds 1, the lease's ttl), so being first is holding, with no second write.
func (b *Backend) tryOnce(ctx context.Context, key, parent string, exists bool, owner string, ttl time.Duration) (lock.Attempt, error) {
	start := time.Now()
	path, err := b.enqueue(ctx, parent, exists, leaseData(owner, 1, ttl))
	if err != nil {
		return lock.Attempt{}, err
	}
	line, _, err := b.children(ctx, parent)
	if err != nil {
		b.abandon(path, 0)
		return lock.Attempt{}, err
	}
	name := path[len(parent)+1:]
	switch position(line, name) {
	case 0:
		e, err := b.read(ctx, path)
		switch {
		case moved(err):
			return b.carried(ctx, key, parent, name, owner, ttl)
		case err != nil:
			b.abandon(path, 0)
			return lock.Attempt{}, err
		case e.stat.Version != 0:
			// A concurrent call by the same owner re-entered it first: its write set the
			// term, not ours.
			return b.carried(ctx, key, parent, name, owner, ttl)
		}
		// The node's mtime was stamped between start and now: a clock sample for free.
		b.clock.observe(start, time.Now(), e.stat.Mtime)
		b.remember(e)
		return b.granted(key, e, start, ttl), nil
	case -1:
		// Gone already: our session ended, another instance found it past a very short ttl,
		// or it was first and a concurrent re-entry by the same owner took it over.
		return b.carried(ctx, key, parent, name, owner, ttl)
	}
	err = b.delete(ctx, path, 0)
	switch {
	case err == nil:
		return lock.Attempt{}, errMoved
	case moved(err):
		// Written (BadVersion) or gone (NoNode) before we could give it back. Either the
		// node reached the front and a concurrent call by the same owner re-entered it, in
		// place or by a takeover into another instance's session, and the lease carries our
		// hold; or the node ended (its ttl, our session, or a release of that lease).
		return b.carried(ctx, key, parent, name, owner, ttl)
	}
	b.abandon(path, 0)
	return lock.Attempt{}, err
}

// carried finishes an attempt whose node, named origin, a concurrent re-entry by the same
// owner found first in line and re-entered (in place, or by a takeover into another session)
// before the attempt could see or give it back: the hold the node was born with is ours. The
// lease's term is the other call's (its ttl, its session), so the attempt writes its own ttl
// as a re-entry would, without adding a hold, and promises what that write keeps. When the
// lease is gone (the owner released it meanwhile, our hold with it) the line is read again
// (errMoved).
func (b *Backend) carried(ctx context.Context, key, parent, origin, owner string, ttl time.Duration) (lock.Attempt, error) {
	for range maxSteps {
		v, err := b.liveHead(ctx, parent)
		if err != nil {
			return lock.Attempt{}, err
		}
		e := v.head
		if e == nil || !e.holding() || e.data.Owner != owner || e.origin() != origin {
			return lock.Attempt{}, errMoved
		}
		start := time.Now()
		d := e.data
		d.TTLms, d.LeaseMs = ttl.Milliseconds(), ttl.Milliseconds()
		next, err := b.rewrite(ctx, e, d)
		if moved(err) {
			continue
		}
		if err != nil {
			return lock.Attempt{}, err
		}
		b.remember(next)
		return b.granted(key, next, start, ttl), nil
	}
	return lock.Attempt{}, b.tooBusy(ctx, parent)
}

// enqueue adds one ephemeral sequential node with d to parent's line, creating the parent when
// it is missing (or was just cleaned up by the last one to leave).
func (b *Backend) enqueue(ctx context.Context, parent string, exists bool, d nodeData) (string, error) {
	prefix := parent + "/" + attemptPrefix()
	raw := d.encode()
	// A create whose answer is lost may still have made the node: the attempt id in its name
	// lets housekeeping find it and take it back.
	undo := func(path string, err error) {
		if err == nil {
			b.abandon(path, 0)
		} else if uncertain(err) {
			b.orphans.add(orphan{prefix: prefix})
		}
	}
	for range 3 {
		if !exists {
			if err := b.createParent(ctx, parent); err != nil {
				return "", err
			}
		}
		path, err := call(ctx, b, func() (string, error) {
			return b.conn.Create(prefix, raw, zk.FlagEphemeralSequential, acl)
		}, undo)
		if errors.Is(err, zk.ErrNoNode) {
			exists = false
			continue
		}
		if err != nil {
			return "", fail(ctx, err)
		}
		return path, nil
	}
	return "", lock.Unavailable(ctx, engine, fmt.Errorf("zklock: key %q: its parent node keeps vanishing", keyOf(parent)))
}

// reenter adds a hold to owner's lease e and restarts its ttl, at e's version: if the lease
// changed since it was read, the caller reads it again (a moved error). At MaxHoldCount it
// refuses and leaves the lease as it is.
func (b *Backend) reenter(ctx context.Context, key string, e *entry, ttl time.Duration) (lock.Attempt, error) {
	if e.data.Holds >= lock.MaxHoldCount {
		return lock.Attempt{}, fmt.Errorf("zklock: key %q: %w (%d)", key, lock.ErrHoldLimit, e.data.Holds)
	}
	start := time.Now()
	d := e.data
	d.Holds++
	d.TTLms, d.LeaseMs = ttl.Milliseconds(), ttl.Milliseconds()
	next, err := b.rewrite(ctx, e, d)
	if err != nil {
		return lock.Attempt{}, err
	}
	b.remember(next)
	return b.granted(key, next, start, ttl), nil
}

// rewrite writes d, the lease's new data, over lease e at e's version: in place when e's node
// belongs to this backend's session, else by taking the lease over into this session, so the
// end the caller is about to promise depends only on a session this backend can vouch for.
// It fails with a moved error when e changed or went since it was read.
func (b *Backend) rewrite(ctx context.Context, e *entry, d nodeData) (*entry, error) {
	if !b.ownedHere(e) {
		return b.takeOver(ctx, e, d)
	}
	st, err := b.set(ctx, e.path, d, e.stat.Version, nil)
	if err != nil {
		return nil, err
	}
	return &entry{path: e.path, data: d, stat: st}, nil
}

// granted is the Attempt of a lease node; start is the local time before its last write.
func (b *Backend) granted(key string, e *entry, start time.Time, ttl time.Duration) lock.Attempt {
	return lock.Attempt{Acquired: true, Lease: lock.Lease{
		Key: key, Owner: e.data.Owner, HolderID: e.holderID(), FencingToken: e.token(),
		ExpiresAt: b.leaseEnd(start, ttl), HoldCount: e.data.Holds,
	}}
}
