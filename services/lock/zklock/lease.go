package zklock

import (
	"context"
	"fmt"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// Release implements lock.Backend. The last hold deletes the node (the next waiter's watch
// fires) and then the key's parent if the line is empty; an earlier hold only counts down.
// Every step is versioned: a lease that changed meanwhile is read again.
func (b *Backend) Release(ctx context.Context, key, owner string, token uint64) (uint32, lock.Released, error) {
	parent := b.parentPath(key)
	for step := range maxSteps {
		e, err := b.ownLease(ctx, parent, owner, step == 0)
		if err != nil {
			return 0, lock.Released{}, err
		}
		if token != 0 && e.token() != token {
			return 0, lock.Released{}, fmt.Errorf("zklock: release: lease with token %d: %w", token, lock.ErrNotHeld)
		}
		if e.data.Holds > 1 {
			d := e.data
			d.Holds--
			// Writing restarts the node's clock: carry over what is left of the lease, so
			// dropping a hold does not renew it. The lease's own ttl stays in LeaseMs. No
			// takeover: a release promises nothing, so whose session holds the node does
			// not matter to it.
			d.LeaseMs = e.leaseTTL().Milliseconds()
			d.TTLms = max(b.clock.left(time.Now(), e).Milliseconds(), 1)
			st, err := b.set(ctx, e.path, d, e.stat.Version, nil)
			if moved(err) {
				b.leases.drop(e.path)
				continue
			}
			if err != nil {
				return 0, lock.Released{}, err
			}
			b.remember(&entry{path: e.path, data: d, stat: st})
			return d.Holds, e.released(), nil
		}
		err = b.delete(ctx, e.path, e.stat.Version)
		b.leases.drop(e.path)
		if moved(err) {
			continue
		}
		if err != nil {
			return 0, lock.Released{}, err
		}
		b.timers.forget(e.path)
		b.dropParent(ctx, parent)
		return 0, e.released(), nil
	}
	return 0, lock.Released{}, b.tooBusy(ctx, parent)
}

// Renew implements lock.Backend: it rewrites the lease's ttl, which restarts its clock. A ttl
// of 0 means the lease's own ttl. A lease whose node belongs to another instance's session is
// taken over into this one's (takeover.go): its end must not hang on a session this instance
// cannot vouch for.
func (b *Backend) Renew(ctx context.Context, key, owner string, ttl time.Duration) (lock.Lease, error) {
	parent := b.parentPath(key)
	for step := range maxSteps {
		e, err := b.ownLease(ctx, parent, owner, step == 0)
		if err != nil {
			return lock.Lease{}, err
		}
		start := time.Now()
		term := ttl
		if term == 0 {
			term = e.leaseTTL()
		}
		d := e.data
		d.TTLms, d.LeaseMs = term.Milliseconds(), term.Milliseconds()
		next, err := b.rewrite(ctx, e, d)
		if moved(err) {
			b.leases.drop(e.path)
			continue
		}
		if err != nil {
			return lock.Lease{}, err
		}
		b.remember(next)
		return b.granted(key, next, start, term).Lease, nil
	}
	return lock.Lease{}, b.tooBusy(ctx, parent)
}

// Inspect implements lock.Backend. Like every call it removes an expired lease it meets, so
// what it reports is what the next acquire would find.
func (b *Backend) Inspect(ctx context.Context, key string) (lock.State, error) {
	v, err := b.liveHead(ctx, b.parentPath(key))
	if err != nil || v.head == nil {
		return lock.State{}, err
	}
	return b.stateOf(v.head), nil
}

// EndExpired implements lock.ExpiryReporter. It is Inspect: reading the line ends (and
// reports) an expired lease at its head. A lease also ends at its ttl without anyone asking,
// by the timer of the instance whose session owns its node.
func (b *Backend) EndExpired(ctx context.Context, key string) (lock.State, error) {
	return b.Inspect(ctx, key)
}

// owns checks that head is owner's lease. A waiter being handed the lock holds nothing yet.
func owns(head *entry, owner string) error {
	switch {
	case head == nil:
		return lock.ErrNotHeld
	case head.data.Owner != owner:
		return lock.ErrNotOwner
	case !head.holding():
		return lock.ErrNotHeld
	}
	return nil
}
