package sqllock

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/coordkit/coordkit/services/lock"
)

const (
	leasesTable = "coordkit_lock_leases"
	fencesTable = "coordkit_lock_fences"
	// waitersTable holds the lines of fair waiters (see fair.go).
	waitersTable = "coordkit_lock_waiters"
	// legacyTable is where versions before the fence floors kept every key's row forever.
	legacyTable = "coordkit_locks"
)

// migrate creates the tables if needed and this scope's fence floors. The first start of a
// scope that lived in legacyTable also copies that table's live leases, in the same
// transaction that creates the floors, so it happens exactly once even when several
// instances start together: the one whose insert created the floors copies.
func (b *Backend) migrate(ctx context.Context) error {
	for _, stmt := range b.d.Schema {
		if err := b.create(ctx, stmt); err != nil {
			return err
		}
	}
	if err := b.addHolderID(ctx); err != nil {
		return err
	}
	if err := b.redateLeases(ctx); err != nil {
		return err
	}
	var n int
	if err := b.db.QueryRowContext(ctx, b.d.TableExists, legacyTable).Scan(&n); err != nil {
		return err
	}
	legacy := n > 0
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	created, err := b.seedFences(ctx, tx, legacy)
	if err != nil {
		return err
	}
	if created && legacy {
		// The old version stored now + ttl in truncated milliseconds on both sides, up to 2 ms
		// short of what it reported; the copy adds them back. Its leases had no own ttl: Renew
		// without one gives them the service's default, as the old version did.
		q := b.d.InsertIgnore + " INTO " + leasesTable +
			" (scope, lock_key, owner, hold_count, fencing_token, expires_at, ttl_ms)" +
			" SELECT scope, lock_key, owner, hold_count, fencing_token, expires_at + 2, ?" +
			" FROM " + legacyTable + " WHERE scope = ? AND owner <> '' AND expires_at > " + b.d.NowMillis + b.d.OnConflictIgnore
		if _, err := tx.ExecContext(ctx, q, lock.DefaultTTL.Milliseconds(), b.scope); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// create runs one statement of the schema. Instances starting together may race to create a
// table or index: PostgreSQL's IF NOT EXISTS checks before it creates, and the loser of the
// race fails on the catalog's unique index once the winner commits. The object is then
// there, and the statement run again does nothing.
func (b *Backend) create(ctx context.Context, stmt string) error {
	if _, err := b.db.ExecContext(ctx, stmt); err == nil {
		return nil
	}
	_, err := b.db.ExecContext(ctx, stmt)
	return err
}

// redateLeases gives every lease of the scope found at start-up its whole ttl from now, when
// the database's clock is the process's (SQLite): the leases were timed on the clock of the
// process that granted them, and the wall clock that this process's clock starts from may
// have been stepped since, either way. A lease can then only last longer than granted (by up
// to its ttl, also a lease whose holder is gone), never end early, and a step back while the
// service was down does not keep a lease for the length of the step. A lease without its own
// ttl (copied from the single-table layout) gets the service's default.
func (b *Backend) redateLeases(ctx context.Context) error {
	if !b.d.ProcessClock {
		return nil
	}
	_, err := b.db.ExecContext(ctx, "UPDATE "+leasesTable+" SET expires_at = "+b.d.NowMillis+
		" + 1 + CASE WHEN ttl_ms > 0 THEN ttl_ms ELSE ? END WHERE scope = ? AND owner <> ''",
		lock.DefaultTTL.Milliseconds(), b.scope)
	return err
}

// addHolderID adds the holder_id column to a leases table an older version created. Its
// rows get "" there: leases whose owner column holds the caller's secret itself (the old
// versions stored it), which no owner's digest matches, so they stay held, by an unknown
// holder, until they expire. Instances starting together may race to add it; the loser's
// ALTER fails, and the column being there then is success.
func (b *Backend) addHolderID(ctx context.Context) error {
	has := func() (bool, error) {
		var n int
		err := b.db.QueryRowContext(ctx, b.d.ColumnExists, leasesTable, "holder_id").Scan(&n)
		return n > 0, err
	}
	if ok, err := has(); err != nil || ok {
		return err
	}
	_, err := b.db.ExecContext(ctx, b.d.AddHolderID)
	if err == nil {
		return nil
	}
	if ok, herr := has(); herr == nil && ok {
		return nil
	}
	return fmt.Errorf("add holder_id: %w", err)
}

// DropScope deletes every lock of scope, and its fence floors, from db. It is for a scope
// that will never be used again, such as a test's: a backend started on the scope afterwards
// hands out fencing tokens from 1 again, and one running meanwhile fails the first acquire
// of every key without a row.
func DropScope(ctx context.Context, db *sql.DB, scope string) error {
	for _, table := range []string{leasesTable, fencesTable, waitersTable} {
		if _, err := db.ExecContext(ctx, "DELETE FROM "+table+" WHERE scope = ?", scope); err != nil {
			return fmt.Errorf("sqllock: drop scope %q: %w", scope, err)
		}
	}
	return nil
}
