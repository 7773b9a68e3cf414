package sqllock

import (
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// Decisions. Every operation decides on a key's row as read, with the database's clock, and
// returns the row to write back (nil: nothing to write). The single calls (lease.go, cas.go)
// and batches (steps.go) decide through these same functions, so a batched operation gets
// exactly the answer its single call would get on the same row.

// needsFirstToken reports whether taking r needs the key's first fencing token from its
// bucket's fence floor (nextToken): r is free and a placeholder that never had a holder.
func needsFirstToken(r row) bool { return !r.held() && r.token == 0 }

// decideTake is an attempt by owner on r: refused with the holder's state when another holds
// it, else granted (grantRow). first is the key's first token when needsFirstToken(r).
func decideTake(key, owner string, r row, ttlMs int64, first uint64) (*row, lock.Attempt, error) {
	if r.held() && r.owner != owner {
		return nil, lock.Attempt{Holder: r.state()}, nil
	}
	return grantRow(key, owner, r, ttlMs, first)
}

// grantRow gives owner the lock on r: a free, released or expired lock is taken over with a
// new token (first for a placeholder), one owner holds is re-entered. It returns the row to
// write back and the caller's lease (without ExpiresAt, which the caller measures).
func grantRow(key, owner string, r row, ttlMs int64, first uint64) (*row, lock.Attempt, error) {
	if r.held() { // owner's: re-entry
		if r.holds >= lock.MaxHoldCount {
			return nil, lock.Attempt{}, lock.ErrHoldLimit
		}
		att := lock.Attempt{Acquired: true, Lease: lock.Lease{Key: key, Owner: owner, HolderID: r.holder, FencingToken: r.token, HoldCount: r.holds + 1}}
		return &row{owner: owner, holder: r.holder, holds: r.holds + 1, token: r.token, expiresAt: expiry(r.now, ttlMs), ttlMs: ttlMs}, att, nil
	}
	token := r.token + 1
	if r.token == 0 {
		token = first
	}
	holder := lock.NewHolderID()
	att := lock.Attempt{Acquired: true, Lease: lock.Lease{Key: key, Owner: owner, HolderID: holder, FencingToken: token, HoldCount: 1}}
	return &row{owner: owner, holder: holder, holds: 1, token: token, expiresAt: expiry(r.now, ttlMs), ttlMs: ttlMs}, att, nil
}

// decideRelease is owner's release of r (of the lease of that token, unless token is 0): one
// hold less, and the lock free once none is left, its row kept free for keepFreeMs.
func decideRelease(r row, owner string, token uint64, keepFreeMs int64) (*row, uint32, lock.Released, error) {
	if err := ownedBy(r, owner); err != nil {
		return nil, 0, lock.Released{}, err
	}
	if token != 0 && r.token != token {
		return nil, 0, lock.Released{}, lock.ErrNotHeld
	}
	remaining, lease := r.holds-1, lock.Released{FencingToken: r.token, HolderID: r.holder}
	if remaining == 0 {
		// Free; the token stays for the next holder, and the janitor deletes the row
		// (folding the token into the fence floor) once the keep-free period passes.
		return &row{token: r.token, expiresAt: r.now + keepFreeMs}, 0, lease, nil
	}
	return &row{owner: owner, holder: r.holder, holds: remaining, token: r.token, expiresAt: r.expiresAt, ttlMs: r.ttlMs}, remaining, lease, nil
}

// decideRenew is owner's renewal of r for ttl (the lease's own ttl when ttl ≤ 0); the
// lease's ExpiresAt is measured from start, before the database was asked.
func decideRenew(key, owner string, ttl time.Duration, start time.Time, r row) (*row, lock.Lease, error) {
	if err := ownedBy(r, owner); err != nil {
		return nil, lock.Lease{}, err
	}
	ttlMs, report := ceilMillis(ttl), ttl
	if ttl <= 0 { // the lease's own ttl
		ttlMs, report = r.ttlMs, time.Duration(r.ttlMs)*time.Millisecond
	}
	lease := lock.Lease{Key: key, Owner: owner, HolderID: r.holder, FencingToken: r.token, HoldCount: r.holds, ExpiresAt: start.Add(report)}
	return &row{owner: owner, holder: r.holder, holds: r.holds, token: r.token, expiresAt: expiry(r.now, ttlMs), ttlMs: ttlMs}, lease, nil
}
