package zklock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZooKeeper has no ttl for ephemeral nodes, so the service ends leases itself. The instance
// whose session owns a lease node keeps a timer at its expiry: when it fires, the node is read
// again and deleted at that version if its ttl really passed (a release through another
// instance moves the deadline, and the timer follows it; a renewal through another instance
// takes the node over, and the timer finds it gone). Other instances end an expired lease when
// they meet it (liveHead); a dead instance's leases end with its session.

// expiryRetry is how soon a timer looks again after it could not reach ZooKeeper.
const expiryRetry = 500 * time.Millisecond

// expiryTimers holds one timer per lease node of this backend's session.
type expiryTimers struct {
	mu      sync.Mutex
	m       map[string]*expiryTimer
	stopped bool
}

// expiryTimer is one node's timer; its identity tells a stale callback from the current one.
type expiryTimer struct{ t *time.Timer }

func (x *expiryTimers) init() { x.m = make(map[string]*expiryTimer) }

// count is the number of leases this backend watches, for the session-expired log line.
func (x *expiryTimers) count() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.m)
}

// forget stops watching path: the lease is gone.
func (x *expiryTimers) forget(path string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if et := x.m[path]; et != nil {
		et.t.Stop()
		delete(x.m, path)
	}
}

// drop forgets path if et is still its timer.
func (x *expiryTimers) drop(path string, et *expiryTimer) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.m[path] == et {
		delete(x.m, path)
	}
}

// stopAll stops every timer for good; Close calls it.
func (x *expiryTimers) stopAll() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.stopped = true
	for _, et := range x.m {
		et.t.Stop()
	}
	clear(x.m)
}

// remember records lease e, first in its line, as just written or read: in the lease cache,
// and with an expiry timer when its node belongs to this backend's session (nodes of other
// sessions have their own instance's timer).
func (b *Backend) remember(e *entry) {
	b.leases.put(e)
	if e.stat.EphemeralOwner != b.conn.SessionID() {
		return
	}
	b.schedule(e.path, nil, b.clock.left(time.Now(), e)+time.Millisecond)
}

// schedule (re)arms path's timer to fire after d. With prev set it only re-arms a timer that
// is still current: a newer arm or a forget wins over a callback finishing late.
func (b *Backend) schedule(path string, prev *expiryTimer, d time.Duration) {
	x := &b.timers
	x.mu.Lock()
	defer x.mu.Unlock()
	cur := x.m[path]
	if x.stopped || (prev != nil && cur != prev) {
		return
	}
	if cur != nil {
		cur.t.Stop()
	}
	et := &expiryTimer{}
	et.t = time.AfterFunc(max(d, 0), func() {
		b.goTracked(func() { b.checkExpiry(path, et) })
	})
	x.m[path] = et
}

// checkExpiry is a lease timer firing: it ends the lease if its ttl passed, else follows it.
func (b *Backend) checkExpiry(path string, et *expiryTimer) {
	ctx, cancel := context.WithTimeout(b.life, b.session)
	defer cancel()
	e, err := b.read(ctx, path)
	switch {
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, errBadData):
		b.timers.drop(path, et) // released, expired elsewhere, or its session ended
		return
	case err != nil:
		b.schedule(path, et, expiryRetry)
		return
	}
	if left := b.clock.left(time.Now(), e); left >= 0 {
		b.schedule(path, et, left+time.Millisecond)
		return
	}
	if err := b.expire(ctx, e); err != nil {
		b.schedule(path, et, expiryRetry)
		return
	}
	// Deleted: expire forgot the timer and this is a no-op. Renewed meanwhile (the delete
	// lost to the new version): look again now.
	b.schedule(path, et, 0)
}
