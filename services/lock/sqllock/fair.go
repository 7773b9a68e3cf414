package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/coordkit/coordkit/services/lock"
)

// Fair mode keeps a line of waiters per key in coordkit_lock_waiters(scope, lock_key, owner,
// arrival, deadline): arrival orders the line, deadline (database clock, Unix ms) is the
// entry's lease. Every change to a key's line but a waiter's leaving happens in a transaction
// that holds the key's lease row, so the line needs no locks of its own, and takes none: it
// is read with plain (non-locking) reads and written by exact primary key only. A range
// write (DELETE … WHERE deadline < ?) would take InnoDB gap locks reaching into the
// neighbouring key's entries, and two keys' transactions would deadlock on each other's
// inserts. The janitor deletes entries long past their deadline that no attempt purged.

var _ lock.QueueBackend = (*Backend)(nil)

// TryAcquireFair implements lock.QueueBackend: one transaction purges the line's lapsed
// entries, takes the lock for owner when it is free and owner is first (or the line is
// empty), or keeps owner's place with its entry's deadline renewed.
func (b *Backend) TryAcquireFair(ctx context.Context, key, owner string, ttl, entryTTL time.Duration) (lock.Attempt, error) {
	start := time.Now()
	put, err := b.takeSlot(ctx)
	if err != nil {
		return lock.Attempt{}, err
	}
	defer put()
	_, found, err := b.peek(ctx, key)
	if err != nil {
		return lock.Attempt{}, lock.Unavailable(ctx, b.d.Name, err)
	}
	ttlMs, entryMs := ceilMillis(ttl), ceilMillis(entryTTL)
	return b.attempt(ctx, key, found, start, ttl, func(tx *sql.Tx, r row) (*row, lock.Attempt, error) {
		if r.held() && r.owner == owner { // a re-entry never queues
			next, granted, err := b.grant(ctx, tx, key, owner, r, ttlMs)
			if err == nil {
				err = b.leaveLineIfIn(ctx, tx, key, owner)
			}
			return next, granted, err
		}
		first, err := b.firstLive(ctx, tx, key, r.now)
		if err != nil {
			return nil, lock.Attempt{}, err
		}
		if !r.held() && (first == "" || first == owner) {
			next, granted, err := b.grant(ctx, tx, key, owner, r, ttlMs)
			if err == nil && first == owner {
				err = b.leaveLine(ctx, tx, key, owner)
			}
			return next, granted, err
		}
		arrival, err := b.stayInLine(ctx, tx, key, owner, r.now, entryMs)
		if err != nil {
			return nil, lock.Attempt{}, err
		}
		var ahead int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+waitersTable+
			" WHERE scope = ? AND lock_key = ? AND arrival < ?", b.scope, key, arrival).Scan(&ahead); err != nil {
			return nil, lock.Attempt{}, dbError{err}
		}
		return nil, lock.Attempt{Holder: r.state(), Place: ahead + 1, Arrival: arrival}, nil
	})
}

// firstLive returns the first entry of key's line whose lease has not passed, deleting the
// lapsed ones ahead of it (by primary key), or "" when there is none.
func (b *Backend) firstLive(ctx context.Context, tx *sql.Tx, key string, now int64) (string, error) {
	for {
		rows, err := tx.QueryContext(ctx, "SELECT owner, deadline FROM "+waitersTable+
			" WHERE scope = ? AND lock_key = ? ORDER BY arrival LIMIT 16", b.scope, key)
		if err != nil {
			return "", dbError{err}
		}
		var lapsed []string
		first, n := "", 0
		for rows.Next() {
			var owner string
			var deadline int64
			if err := rows.Scan(&owner, &deadline); err != nil {
				rows.Close()
				return "", dbError{err}
			}
			n++
			if deadline >= now {
				first = owner
				break
			}
			lapsed = append(lapsed, owner)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return "", dbError{err}
		}
		for _, owner := range lapsed {
			if err := b.leaveLine(ctx, tx, key, owner); err != nil {
				return "", err
			}
		}
		if first != "" || n < 16 {
			return first, nil
		}
	}
}

// stayInLine renews owner's entry in key's line, or adds it at the end, and returns its
// arrival. Arrivals rise with the database clock (in microsecond steps) and past every
// entry's, so they keep their order when a line empties and fills again.
func (b *Backend) stayInLine(ctx context.Context, tx *sql.Tx, key, owner string, now, entryMs int64) (int64, error) {
	var arrival int64
	err := tx.QueryRowContext(ctx, "SELECT arrival FROM "+waitersTable+
		" WHERE scope = ? AND lock_key = ? AND owner = ?", b.scope, key, owner).Scan(&arrival)
	switch {
	case err == nil:
		if _, err := tx.ExecContext(ctx, "UPDATE "+waitersTable+" SET deadline = ?"+
			" WHERE scope = ? AND lock_key = ? AND owner = ?", now+entryMs, b.scope, key, owner); err != nil {
			return 0, dbError{err}
		}
		return arrival, nil
	case !errors.Is(err, sql.ErrNoRows):
		return 0, dbError{err}
	}
	var last sql.NullInt64
	if err := tx.QueryRowContext(ctx, "SELECT MAX(arrival) FROM "+waitersTable+
		" WHERE scope = ? AND lock_key = ?", b.scope, key).Scan(&last); err != nil {
		return 0, dbError{err}
	}
	arrival = max(last.Int64+1, now*1000)
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+waitersTable+" (scope, lock_key, owner, arrival, deadline)"+
		" VALUES (?, ?, ?, ?, ?)", b.scope, key, owner, arrival, now+entryMs); err != nil {
		return 0, dbError{err}
	}
	return arrival, nil
}

// leaveLineIfIn deletes owner's entry from key's line inside tx when it has one: a DELETE of
// a missing primary key would take a gap lock on InnoDB.
func (b *Backend) leaveLineIfIn(ctx context.Context, tx *sql.Tx, key, owner string) error {
	var one int
	err := tx.QueryRowContext(ctx, "SELECT 1 FROM "+waitersTable+
		" WHERE scope = ? AND lock_key = ? AND owner = ?", b.scope, key, owner).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return dbError{err}
	}
	return b.leaveLine(ctx, tx, key, owner)
}

// leaveLine deletes owner's entry (which exists) from key's line inside tx.
func (b *Backend) leaveLine(ctx context.Context, tx *sql.Tx, key, owner string) error {
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+waitersTable+
		" WHERE scope = ? AND lock_key = ? AND owner = ?", b.scope, key, owner); err != nil {
		return dbError{err}
	}
	return nil
}

// LeaveQueue implements lock.QueueBackend. It deletes owner's entry on its own: the line's
// order does not depend on it, so it needs no lock on the key's row.
func (b *Backend) LeaveQueue(ctx context.Context, key, owner string) error {
	err := b.d.Retry(ctx, func() error {
		var one int
		err := b.db.QueryRowContext(ctx, "SELECT 1 FROM "+waitersTable+
			" WHERE scope = ? AND lock_key = ? AND owner = ?", b.scope, key, owner).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // not in line (it got the lock, or its entry was purged)
		}
		if err == nil {
			_, err = b.db.ExecContext(ctx, "DELETE FROM "+waitersTable+
				" WHERE scope = ? AND lock_key = ? AND owner = ?", b.scope, key, owner)
		}
		return err
	})
	if err != nil {
		return lock.Unavailable(ctx, b.d.Name, err)
	}
	return nil
}

// lapsedEntryGrace is how long past its deadline a waiter's entry stays before the janitor
// deletes it: attempts on the key purge lapsed entries themselves, the janitor only the
// lines nobody waits in any more.
const lapsedEntryGrace = time.Minute

// reclaimLines deletes the scope's entries long past their deadline, found with a plain
// read and deleted one by one by primary key, taking no gap locks.
func (b *Backend) reclaimLines(ctx context.Context) error {
	rows, err := b.db.QueryContext(ctx, "SELECT lock_key, owner FROM "+waitersTable+" WHERE scope = ? AND deadline < "+
		b.d.NowMillis+" - ? LIMIT 256", b.scope, lapsedEntryGrace.Milliseconds())
	if err != nil {
		return err
	}
	type entry struct{ key, owner string }
	var lapsed []entry
	for rows.Next() {
		var e entry
		if err := rows.Scan(&e.key, &e.owner); err != nil {
			rows.Close()
			return err
		}
		lapsed = append(lapsed, e)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	for _, e := range lapsed {
		if _, err := b.db.ExecContext(ctx, "DELETE FROM "+waitersTable+" WHERE scope = ? AND lock_key = ? AND owner = ?"+
			" AND deadline < "+b.d.NowMillis+" - ?", b.scope, e.key, e.owner, lapsedEntryGrace.Milliseconds()); err != nil {
			return err
		}
	}
	return nil
}
