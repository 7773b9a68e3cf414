package zklock

import (
	"context"
	"sync"
	"time"
)

// A watchdog renews every lease at a third of its ttl, and reading a line to find the lease
// costs two round trips before the write. leaseCache remembers, per key, the lease node this
// backend last wrote or read, so renew, release and re-entry are one versioned write. It never
// decides anything on its own: ZooKeeper stays the only truth, because
//   - a node that was first in line stays first until it is deleted (later nodes get higher
//     sequence numbers, and the parent cannot go while it has children), and
//   - every use is a write at the cached version, which fails (BadVersion, NoNode) if anything
//     changed since; the caller then drops the entry and reads the line.

// leaseCache maps a key's parent path to its lease node as last seen.
type leaseCache struct {
	mu sync.Mutex
	m  map[string]*entry
}

func (c *leaseCache) init() { c.m = make(map[string]*entry) }

// put remembers e, the first (holding) node of its line.
func (c *leaseCache) put(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[parentOf(e.path)] = e
}

// get returns the cached lease of parent's line.
func (c *leaseCache) get(parent string) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[parent]
}

// drop forgets the lease at path (a newer entry for the same line stays).
func (c *leaseCache) drop(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[parentOf(path)]; e != nil && e.path == path {
		delete(c.m, parentOf(path))
	}
}

// sweep forgets leases whose ttl passed: live ones are written again (and re-cached) by their
// renewals, so the cache holds no more than the leases this backend recently touched.
func (c *leaseCache) sweep(clock *serverClock, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, e := range c.m {
		if clock.expired(now, e) {
			delete(c.m, p)
		}
	}
}

// cachedLease returns owner's live lease of parent's line from the cache, or nil. The caller
// writes it at its version and reads the line instead when that fails.
func (b *Backend) cachedLease(parent, owner string) *entry {
	e := b.leases.get(parent)
	if e == nil || e.data.Owner != owner || !e.holding() || b.clock.expired(time.Now(), e) {
		return nil
	}
	return e
}

// ownLease finds owner's lease of parent's line: on a first try from the cache, else by
// reading the line (which fails with lock.ErrNotHeld or lock.ErrNotOwner).
func (b *Backend) ownLease(ctx context.Context, parent, owner string, first bool) (*entry, error) {
	if first {
		if e := b.cachedLease(parent, owner); e != nil {
			return e, nil
		}
	}
	v, err := b.liveHead(ctx, parent)
	if err != nil {
		return nil, err
	}
	if err := owns(v.head, owner); err != nil {
		return nil, err
	}
	return v.head, nil
}
