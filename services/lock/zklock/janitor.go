package zklock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// A call that fails or is abandoned halfway can leave a node in a line that nobody will ever
// release: a create whose answer was lost, a waiter that gave up while disconnected. Such an
// orphan would hold the lock (or the line behind it) until its ttl or its session ends, so
// housekeeping takes it back as soon as the session allows. Orphans never outlive the session
// that made them: after a session expiry there is nothing to do, and the deletes say so.

// housekeepingTick paces retries and the clock refresh.
const housekeepingTick = 5 * time.Second

// closeReclaimTimeout bounds the last round of reclaims a graceful Close runs.
const closeReclaimTimeout = 2 * time.Second

// clockRefresh is the age after which an idle backend samples the leader's clock again.
const clockRefresh = time.Minute

// orphan is a node to take back: the exact node path at version (-1: any), or, for a create
// whose answer was lost, every node whose path starts with prefix.
type orphan struct {
	path    string
	version int32
	prefix  string
}

// orphanList is housekeeping's queue of orphans.
type orphanList struct {
	mu    sync.Mutex
	items []orphan
	kick  chan struct{}
	round chan struct{} // one slot, held while a round of reclaims runs
}

func (o *orphanList) init() {
	o.kick = make(chan struct{}, 1)
	o.round = make(chan struct{}, 1)
}

// add queues an orphan and wakes housekeeping.
func (o *orphanList) add(x orphan) {
	o.mu.Lock()
	o.items = append(o.items, x)
	o.mu.Unlock()
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// retry queues an orphan again without waking housekeeping.
func (o *orphanList) retry(x orphan) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.items = append(o.items, x)
}

// take empties the queue.
func (o *orphanList) take() []orphan {
	o.mu.Lock()
	defer o.mu.Unlock()
	items := o.items
	o.items = nil
	return items
}

// left is how many orphans are queued.
func (o *orphanList) left() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.items)
}

// abandon hands our node at path to housekeeping; version guards against deleting a node
// that became someone's lease meanwhile.
func (b *Backend) abandon(path string, version int32) {
	b.orphans.add(orphan{path: path, version: version})
}

// housekeeping takes back orphans, keeps the clock sample fresh and sweeps the lease cache,
// until Close.
func (b *Backend) housekeeping() {
	tick := time.NewTicker(housekeepingTick)
	defer tick.Stop()
	for {
		changed := b.state.changed()
		select {
		case <-b.life.Done():
			return
		case <-b.orphans.kick:
		case <-changed:
		case <-tick.C:
		}
		if !b.connected() {
			continue
		}
		b.leases.sweep(&b.clock, time.Now())
		ctx, cancel := context.WithTimeout(b.life, b.session)
		if time.Since(b.clock.lastSample()) > clockRefresh {
			if err := b.sampleClock(ctx); err != nil {
				b.log.Debug("zklock: clock sample failed", "err", err)
			}
		}
		b.reclaimOrphans(ctx)
		cancel()
	}
}

// reclaimOrphans takes back every orphan queued so far, as long as ctx allows. Rounds run one
// at a time (the last one Close runs waits for housekeeping's, within its own ctx); an orphan
// a round could not take back for want of a session or of time stays queued.
func (b *Backend) reclaimOrphans(ctx context.Context) {
	select {
	case b.orphans.round <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-b.orphans.round }()
	for _, o := range b.orphans.take() {
		err := b.reclaim(ctx, o)
		switch {
		case err == nil:
		case errors.Is(err, lock.ErrUnavailable) || ctx.Err() != nil:
			b.orphans.retry(o) // at the next tick, or the next session change
		default:
			b.log.Warn("zklock: could not remove an orphaned lock node; it ends with its ttl", "node", o.path+o.prefix, "err", err)
		}
	}
}

// reclaim deletes one orphan and then its key's parent when the line is empty.
func (b *Backend) reclaim(ctx context.Context, o orphan) error {
	if o.prefix == "" {
		err := b.delete(ctx, o.path, o.version)
		switch {
		case err == nil:
			b.timers.forget(o.path)
			b.leases.drop(o.path)
			b.dropParent(ctx, parentOf(o.path))
		case moved(err):
			// Gone already, or written since: then it is a lease someone holds, and it ends
			// with its ttl like any other.
		default:
			return err
		}
		return nil
	}
	parent := parentOf(o.prefix)
	line, _, err := b.children(ctx, parent)
	if err != nil {
		return err
	}
	for _, c := range line {
		if p := parent + "/" + c.name; strings.HasPrefix(p, o.prefix) {
			if err := b.delete(ctx, p, 0); err != nil && !moved(err) {
				return err
			}
		}
	}
	if len(line) > 0 {
		b.dropParent(ctx, parent)
	}
	return nil
}
