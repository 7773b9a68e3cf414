package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/services/lock"
)

// waitGrace is how long past its wait a waiter's node stays valid: the time a waiter that
// reached the front may take to write its lease. A waiter node older than wait + waitGrace
// belongs to a stalled or vanished waiter, and whoever meets it removes it from the line.
const waitGrace = 2 * time.Second

// queue waits in key's line until the lock is ours or deadline passes. A waiter whose node
// was removed (it was taken for dead, or its session ended) queues again while time is left.
func (b *Backend) queue(ctx context.Context, key, parent string, exists bool, owner string, ttl time.Duration, deadline time.Time) (lock.Attempt, error) {
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return b.holder(ctx, parent)
		}
		path, err := b.enqueue(ctx, parent, exists, nodeData{Owner: owner, TTLms: (left + waitGrace).Milliseconds()})
		if err != nil {
			return lock.Attempt{}, err
		}
		att, err := b.waitTurn(ctx, key, parent, path, owner, ttl, deadline)
		if !errors.Is(err, errMoved) {
			return att, err
		}
		exists = true
	}
}

// waitTurn waits until path, our node in parent's line, is first, then turns it into the lease.
// It watches only the node just ahead (its deletion wakes us, nobody else), and also wakes
// when that node's ttl passes, to remove it if its owner did not, and when the session
// changes: without a session the wait fails as unavailable, since it could not tell whether
// the lock is ours.
func (b *Backend) waitTurn(ctx context.Context, key, parent, path, owner string, ttl time.Duration, deadline time.Time) (lock.Attempt, error) {
	name := path[len(parent)+1:]
	for {
		changed := b.state.changed()
		line, _, err := b.children(ctx, parent)
		if err != nil {
			b.leave(ctx, path)
			return lock.Attempt{}, err
		}
		i := position(line, name)
		switch i {
		case -1:
			return lock.Attempt{}, errMoved
		case 0:
			return b.promote(ctx, key, path, owner, ttl)
		}
		ahead, watch, err := b.readWatch(ctx, parent+"/"+line[i-1].name)
		switch {
		case moved(err):
			continue
		case err != nil:
			b.leave(ctx, path)
			return lock.Attempt{}, err
		case b.clock.expired(time.Now(), ahead):
			if err := b.expire(ctx, ahead); err != nil {
				b.leave(ctx, path)
				return lock.Attempt{}, err
			}
			continue
		case i == 1 && ahead.holding() && ahead.data.Owner == owner:
			// The owner already holds the lock (it was granted through another call
			// meanwhile): re-enter rather than wait behind ourselves.
			b.leave(ctx, path)
			att, err := b.reenter(ctx, key, ahead, ttl)
			if moved(err) {
				// The lease changed meanwhile: queue again and look anew.
				return lock.Attempt{}, errMoved
			}
			return att, err
		}

		timer := time.NewTimer(min(time.Until(deadline), b.clock.left(time.Now(), ahead)+time.Millisecond))
		select {
		case <-watch:
			timer.Stop()
			b.wakeups.Add(1)
		case <-timer.C:
			if !time.Now().Before(deadline) {
				b.leave(ctx, path)
				return b.holder(ctx, parent)
			}
		case <-changed:
			timer.Stop()
			if !b.connected() {
				b.leave(ctx, path)
				return lock.Attempt{}, lock.Unavailable(ctx, engine, fmt.Errorf("zklock: key %q: lost the ZooKeeper session while waiting", key))
			}
		case <-ctx.Done():
			timer.Stop()
			b.leave(ctx, path)
			// The cause, not ctx.Err(): a wait ended by the server's shutdown must reach
			// the caller as that (unavailable), like every other backend's.
			return lock.Attempt{}, context.Cause(ctx)
		case <-b.life.Done():
			timer.Stop()
			return lock.Attempt{}, lock.Unavailable(ctx, engine, errClosed)
		}
	}
}

// promote turns our waiter node, now first in line, into the lease: holds 1 and the lease's
// ttl, written at version 0 (a waiter node is written by nobody else), which restarts the
// node's clock, so the lease runs from now, not from when we queued.
func (b *Backend) promote(ctx context.Context, key, path, owner string, ttl time.Duration) (lock.Attempt, error) {
	start := time.Now()
	d := leaseData(owner, 1, ttl)
	st, err := b.set(ctx, path, d, 0, func(*zk.Stat, error) {
		// A lease nobody was told about: give the lock to the next in line, unless a
		// re-entry by the same owner has been granted on it since (version past 1).
		b.abandon(path, 1)
	})
	switch {
	case moved(err):
		// Removed as stalled, or our session ended: queue again if time is left.
		return lock.Attempt{}, errMoved
	case err != nil:
		// Not promoted (or not knowingly): our node must not stay first in line.
		b.leave(ctx, path)
		return lock.Attempt{}, err
	}
	e := &entry{path: path, data: d, stat: st}
	b.remember(e)
	return b.granted(key, e, start, ttl), nil
}

// leaveTimeout bounds how long leave waits for the delete of a waiter's node, past the end
// of its call.
const leaveTimeout = time.Second

// leave takes our waiter node out of the line: at once when the session allows, otherwise
// housekeeping does when it is back (with the session gone, the node is gone too). The delete
// runs on the backend's life, not on ctx, the call's context, which has often ended (the
// caller gave up, or the server is shutting down and is about to close this backend): left
// to housekeeping, the node could outlive the backend and hold everyone behind it in line
// until its ttl, the wait plus waitGrace. (etcd's concurrency.Mutex likewise gives its key
// back on the client's context when a Lock's context ends.) While the caller still waits
// for the answer, the delete keeps to its deadline.
func (b *Backend) leave(ctx context.Context, path string) {
	if b.connected() {
		end := time.Now().Add(leaveTimeout)
		if d, ok := ctx.Deadline(); ok && ctx.Err() == nil && d.Before(end) {
			end = d
		}
		dctx, cancel := context.WithDeadline(b.life, end)
		err := b.delete(dctx, path, 0)
		cancel()
		if err == nil || moved(err) {
			return
		}
	}
	b.abandon(path, 0)
}

// holder reports who holds the lock after a wait that did not get it.
func (b *Backend) holder(ctx context.Context, parent string) (lock.Attempt, error) {
	v, err := b.liveHead(ctx, parent)
	if err != nil || v.head == nil {
		return lock.Attempt{}, err
	}
	return lock.Attempt{Holder: b.stateOf(v.head)}, nil
}
