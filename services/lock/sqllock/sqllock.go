// Package sqllock is the lock backend on a SQL database, following the seeds' unique-key
// method: one row per key (the primary key makes two holders impossible) with owner, hold
// count, fencing counter and expiry. Every operation is one short transaction that locks the
// row, decides in Go and writes back: no transaction is ever held open for a lease.
//
// A released lock keeps its row (owner empty) so the fencing counter survives; rows are
// small, one per key ever locked. A scope column lets several coordkit deployments share one
// database without sharing locks.
package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// Backend implements lock.Backend on a SQL database.
type Backend struct {
	db     *sql.DB
	d      Dialect
	scope  string
	ownsDB bool

	lockRow, inspectRow, insertRow, update string
}

var _ lock.Backend = (*Backend)(nil)

// DefaultScope is the scope of a backend whose caller names none.
const DefaultScope = "default"

// New creates the schema if needed and returns a backend on db whose locks live in scope
// (DefaultScope when empty). The caller keeps ownership of db.
func New(ctx context.Context, db *sql.DB, d Dialect, scope string) (*Backend, error) {
	if scope == "" {
		scope = DefaultScope
	}
	for _, stmt := range d.Schema {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("sqllock: %s schema: %w", d.Name, err)
		}
	}
	const where = " FROM coordkit_locks WHERE scope = ? AND lock_key = ?"
	cols := "SELECT owner, hold_count, fencing_token, expires_at, " + d.NowMillis
	return &Backend{
		db:         db,
		d:          d,
		scope:      scope,
		lockRow:    cols + where + d.ForUpdate,
		inspectRow: cols + where,
		insertRow:  d.InsertIgnore + " INTO coordkit_locks (scope, lock_key) VALUES (?, ?)",
		update: "UPDATE coordkit_locks SET owner = ?, hold_count = ?, fencing_token = ?, expires_at = ?" +
			" WHERE scope = ? AND lock_key = ?",
	}, nil
}

// row is a lock row as read inside a transaction, with the database's clock.
type row struct {
	owner     string
	holds     uint32
	token     uint64
	expiresAt int64 // database clock, Unix ms
	now       int64 // database clock, Unix ms
}

// held reports whether the row is a live lease.
func (r row) held() bool { return r.owner != "" && r.expiresAt > r.now }

// expiry is the expires_at to store for a lease of ttl granted when the database clock read
// now. The clock counts whole milliseconds, truncated: the instant it was read may be up to a
// millisecond past now. So the ttl rounds up to whole milliseconds and one more is added;
// the row then stays held until the database clock reads past now + 1 + ttl, strictly after
// (read instant + ttl), and so after the expires_at reported to the caller, which is
// measured from before the database was asked.
func expiry(now int64, ttl time.Duration) int64 {
	return now + 1 + ceilMillis(ttl)
}

// ceilMillis is d in whole milliseconds, rounded up.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// state converts the row to the public view, moving its expiry onto the local clock.
func (r row) state() lock.State {
	if !r.held() {
		return lock.State{}
	}
	return lock.State{
		Held: true, HolderID: lock.HolderID(r.owner), FencingToken: r.token, HoldCount: r.holds,
		ExpiresAt: time.Now().Add(time.Duration(r.expiresAt-r.now) * time.Millisecond),
	}
}

// inTx runs fn in one short transaction that holds the key's row lock, and commits when fn
// returns no error. fn returns the row to write back, or nil.
//
// A key seen for the first time gets its row from a separate INSERT IGNORE before the
// transaction is tried again: inserting inside the transaction would let two first-time
// acquirers deadlock on InnoDB's gap locks. With the row in place, every transaction locks
// exactly one existing row, so transactions on one key queue and never deadlock.
func (b *Backend) inTx(ctx context.Context, key string, create bool, fn func(r row) (*row, error)) error {
	err := b.tryTx(ctx, key, fn, !create)
	if !errors.Is(err, errNoRow) {
		return err
	}
	if _, err := b.db.ExecContext(ctx, b.insertRow, b.scope, key); err != nil {
		return lock.Unavailable(ctx, b.d.Name, err)
	}
	if err := b.tryTx(ctx, key, fn, false); !errors.Is(err, errNoRow) {
		return err
	}
	return fmt.Errorf("sqllock: %s: row of key %q missing right after it was inserted", b.d.Name, key)
}

// errNoRow makes inTx create the missing row and try again.
var errNoRow = errors.New("sqllock: no row")

// tryTx is one transaction of inTx. A missing row is errNoRow, or a free row (token 0) when
// freeIfMissing.
func (b *Backend) tryTx(ctx context.Context, key string, fn func(r row) (*row, error), freeIfMissing bool) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return lock.Unavailable(ctx, b.d.Name, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	r, err := b.read(ctx, tx, b.lockRow, key)
	switch {
	case errors.Is(err, sql.ErrNoRows) && !freeIfMissing:
		return errNoRow
	case errors.Is(err, sql.ErrNoRows):
		r = row{} // never locked: free; Release and Renew fail on it without writing
	case err != nil:
		return lock.Unavailable(ctx, b.d.Name, err)
	}
	next, err := fn(r)
	if err != nil {
		return err
	}
	if next != nil {
		if _, err := tx.ExecContext(ctx, b.update, next.owner, next.holds, next.token, next.expiresAt, b.scope, key); err != nil {
			return lock.Unavailable(ctx, b.d.Name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return lock.Unavailable(ctx, b.d.Name, err)
	}
	return nil
}

func (b *Backend) read(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, query, key string) (row, error) {
	var r row
	err := q.QueryRowContext(ctx, query, b.scope, key).Scan(&r.owner, &r.holds, &r.token, &r.expiresAt, &r.now)
	return r, err
}

// TryAcquire implements lock.Backend.
func (b *Backend) TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Attempt, error) {
	start := time.Now()
	var att lock.Attempt
	err := b.inTx(ctx, key, true, func(r row) (*row, error) {
		expires := expiry(r.now, ttl)
		switch {
		case !r.held(): // free, released or expired: take it over with a new token
			att = lock.Attempt{Acquired: true, Lease: lock.Lease{Key: key, Owner: owner, FencingToken: r.token + 1, HoldCount: 1}}
			return &row{owner: owner, holds: 1, token: r.token + 1, expiresAt: expires}, nil
		case r.owner == owner: // re-entry
			att = lock.Attempt{Acquired: true, Lease: lock.Lease{Key: key, Owner: owner, FencingToken: r.token, HoldCount: r.holds + 1}}
			return &row{owner: owner, holds: r.holds + 1, token: r.token, expiresAt: expires}, nil
		default:
			att = lock.Attempt{Holder: r.state()}
			return nil, nil
		}
	})
	if err != nil {
		return lock.Attempt{}, err
	}
	if att.Acquired {
		att.Lease.ExpiresAt = start.Add(ttl)
	}
	return att, nil
}

// Release implements lock.Backend.
func (b *Backend) Release(ctx context.Context, key, owner string) (uint32, error) {
	var remaining uint32
	err := b.inTx(ctx, key, false, func(r row) (*row, error) {
		if err := ownedBy(r, owner); err != nil {
			return nil, err
		}
		remaining = r.holds - 1
		if remaining == 0 {
			return &row{token: r.token}, nil // free; the token stays for the next holder
		}
		return &row{owner: owner, holds: remaining, token: r.token, expiresAt: r.expiresAt}, nil
	})
	return remaining, err
}

// Renew implements lock.Backend.
func (b *Backend) Renew(ctx context.Context, key, owner string, ttl time.Duration) (lock.Lease, error) {
	start := time.Now()
	var lease lock.Lease
	err := b.inTx(ctx, key, false, func(r row) (*row, error) {
		if err := ownedBy(r, owner); err != nil {
			return nil, err
		}
		lease = lock.Lease{Key: key, Owner: owner, FencingToken: r.token, HoldCount: r.holds, ExpiresAt: start.Add(ttl)}
		return &row{owner: owner, holds: r.holds, token: r.token, expiresAt: expiry(r.now, ttl)}, nil
	})
	return lease, err
}

// Inspect implements lock.Backend.
func (b *Backend) Inspect(ctx context.Context, key string) (lock.State, error) {
	r, err := b.read(ctx, b.db, b.inspectRow, key)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return lock.State{}, nil
	case err != nil:
		return lock.State{}, lock.Unavailable(ctx, b.d.Name, err)
	}
	return r.state(), nil
}

// Close implements lock.Backend: it closes the database when the backend opened it.
func (b *Backend) Close() error {
	if b.ownsDB {
		return b.db.Close()
	}
	return nil
}

func ownedBy(r row, owner string) error {
	switch {
	case !r.held():
		return lock.ErrNotHeld
	case r.owner != owner:
		return lock.ErrNotOwner
	}
	return nil
}

// DropScope deletes every lock of scope from db. It is for a scope that will never be used
// again, such as a test's: a later backend in that scope would hand out fencing tokens again
// from 1.
func DropScope(ctx context.Context, db *sql.DB, scope string) error {
	if _, err := db.ExecContext(ctx, "DELETE FROM coordkit_locks WHERE scope = ?", scope); err != nil {
		return fmt.Errorf("sqllock: drop scope %q: %w", scope, err)
	}
	return nil
}
