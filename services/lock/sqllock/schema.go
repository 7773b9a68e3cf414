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
		if _, err := b.db.ExecContext(ctx, stmt); err != nil {
			return err
		}
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
			" FROM " + legacyTable + " WHERE scope = ? AND owner <> '' AND expires_at > " + b.d.NowMillis
		if _, err := tx.ExecContext(ctx, q, lock.DefaultTTL.Milliseconds(), b.scope); err != nil {
			return err
		}
	}
	return tx.Commit()
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
